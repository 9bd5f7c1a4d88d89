# tests/model/compute.cmake
