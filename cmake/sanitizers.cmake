# Sanitizer and fuzzing configurations (issue 11). Included from the top-level CMakeLists.txt
# before CUDA is looked for: sanitizer builds are CPU-only.
#
#   -DLINSERVE_SANITIZE=address,undefined   ASan + UBSan (gcc or clang)
#   -DLINSERVE_SANITIZE=thread              TSan (gcc or clang)
#   -DLINSERVE_FUZZ=ON                      libFuzzer targets (tests/fuzz), clang only; implies
#                                           address,undefined and builds tests/fuzz instead of
#                                           the other tests, the clients and the benchmarks
#
# Every target of ours is compiled and linked with the sanitizers, generated protobuf code
# included. Debian's libraries (gRPC, protobuf, Abseil, OpenBLAS, libstdc++) are not
# instrumented: ASan still checks every access our code makes and intercepts every malloc/free;
# TSan cannot see synchronisation inside them (see tests/sanitizers/README.md for what that
# means and how the TSan job handles it). UBSan stops at the first finding
# (-fno-sanitize-recover), so a finding fails the test it happens in.
set(LINSERVE_SANITIZE "" CACHE STRING
    "Sanitizers for linserve's own code: empty (none), address,undefined, or thread")
option(LINSERVE_FUZZ "Build the libFuzzer targets of tests/fuzz (clang) and nothing else" OFF)

if(LINSERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LINSERVE_FUZZ=ON needs clang (e.g. -DCMAKE_CXX_COMPILER=clang++-14)")
  endif()
  if(LINSERVE_SANITIZE STREQUAL "")
    set(LINSERVE_SANITIZE address,undefined)
  endif()
endif()

if(NOT LINSERVE_SANITIZE STREQUAL "")
  if(LINSERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LINSERVE_SANITIZE is CPU-only: it cannot go with LINSERVE_CUDA=ON")
  endif()
  set(LINSERVE_CUDA OFF)
  # -g1: line tables for the reports' stack traces at a fraction of -g's build and link time.
  set(linserve_sanitize_flags
      -fsanitize=${LINSERVE_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -g1)
  add_compile_options(${linserve_sanitize_flags})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's -Wmaybe-uninitialized is known to misfire on sanitizer-instrumented code (its manual
    # says so under -fsanitize=); seen here in libstdc++'s std::regex. The normal builds keep it.
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # ASan's instrumentation keeps clang from vectorising some `omp simd` loops (kernels/cpu),
    # which -Werror would turn into an error: it says nothing about the code's correctness.
    add_compile_options(-Wno-pass-failed)
  endif()
  add_link_options(-fsanitize=${LINSERVE_SANITIZE})
  if(LINSERVE_FUZZ)
    # Coverage feedback from every library of ours; the fuzz executables add -fsanitize=fuzzer
    # (libFuzzer's main) at link time.
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
  message(STATUS "linserve: sanitizers ${LINSERVE_SANITIZE}")
endif()

# Called at the end of the top-level CMakeLists.txt, once every target exists: links
# tests/sanitizers/ into every executable of a sanitizer build. dlopen_deepbind.cc lets the
# SentencePiece plugin load without RTLD_DEEPBIND, which the sanitizers refuse; in a TSan build,
# absl_tsan_annotations.cc makes absl::Mutex & co. visible to TSan (Debian's Abseil is not
# instrumented). See tests/sanitizers/README.md.
function(linserve_sanitizer_support)
  if(LINSERVE_SANITIZE STREQUAL "")
    return()
  endif()
  set(sources ${PROJECT_SOURCE_DIR}/tests/sanitizers/dlopen_deepbind.cc)
  if(LINSERVE_SANITIZE MATCHES "thread")
    list(APPEND sources ${PROJECT_SOURCE_DIR}/tests/sanitizers/absl_tsan_annotations.cc)
  endif()
  add_library(linserve_sanitizer_support OBJECT ${sources})
  target_link_libraries(linserve_sanitizer_support PUBLIC absl::synchronization absl::strerror
                        ${CMAKE_DL_LIBS})
  linserve_warnings(linserve_sanitizer_support)
  set(dirs ${PROJECT_SOURCE_DIR})
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "EXECUTABLE")
        target_link_libraries(${target} PRIVATE linserve_sanitizer_support)
      endif()
    endforeach()
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
  endwhile()
endfunction()
