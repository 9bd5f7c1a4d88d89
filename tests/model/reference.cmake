# tests/model/reference.cmake
