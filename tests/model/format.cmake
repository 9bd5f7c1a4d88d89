# tests/model/format.cmake
