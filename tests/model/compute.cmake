# Kernels, the CPU backend, the sampler and linserve-generate.
linserve_test(cpu_kernels_test SOURCES cpu_kernels_test.cc LIBS linserve_kernels_cpu)
# Issue 28: the CPU weight formats (bf16, fp16, int8) and the Linear over them.
linserve_test(weight_formats_test SOURCES weight_formats_test.cc LIBS linserve_kernels_cpu)
linserve_test(int8_linear_test SOURCES int8_linear_test.cc LIBS linserve_kernels_cpu)
linserve_test(weight_precision_test SOURCES weight_precision_test.cc
              LIBS linserve_model_compute linserve_testing)
# Issue 29: --state_precision's parsing and each backend's refusals (the bf16 state itself runs
# on CUDA: tests/gpu).
linserve_test(state_precision_test SOURCES state_precision_test.cc
              LIBS linserve_model_compute linserve_testing)
linserve_test(cpu_backend_test SOURCES cpu_backend_test.cc
              LIBS linserve_model_compute linserve_testing)
linserve_test(sampler_test SOURCES sampler_test.cc LIBS linserve_model_compute)
linserve_test(sampler_mask_test SOURCES sampler_mask_test.cc LIBS linserve_model_compute)
linserve_test(backend_sampling_test SOURCES backend_sampling_test.cc
              LIBS linserve_model_compute linserve_testing)
linserve_test(layer_list_test SOURCES layer_list_test.cc
              LIBS linserve_model_compute linserve_testing)
linserve_test(sliding_window_attention_test SOURCES sliding_window_attention_test.cc
              LIBS linserve_testing_cpu_mixer nlohmann_json::nlohmann_json)
linserve_test(delta_rule_test SOURCES delta_rule_test.cc
              LIBS linserve_testing_cpu_mixer nlohmann_json::nlohmann_json)
linserve_test(gated_linear_attention_test SOURCES gated_linear_attention_test.cc
              LIBS linserve_testing_cpu_mixer nlohmann_json::nlohmann_json)
linserve_test(mamba2_test SOURCES mamba2_test.cc
              LIBS linserve_testing_cpu_mixer nlohmann_json::nlohmann_json)
linserve_test(golden_test SOURCES golden_test.cc LIBS linserve_model_compute FIXTURES golden)
linserve_test(generate_test SOURCES generate_test.cc LIBS linserve_model_compute linserve_testing)
target_compile_definitions(generate_test PRIVATE
  LINSERVE_GENERATE_BIN="$<TARGET_FILE:linserve-generate>")
add_dependencies(generate_test linserve-generate)
linserve_test(sampler_mirror_test SOURCES sampler_mirror_test.cc
              LIBS linserve_model_compute linserve_testing LABELS python)
# Issue 3: the bundled model's validation loss on the fixed slice vs the reference and the card.
linserve_test(bundled_model_test SOURCES bundled_model_test.cc
              LIBS linserve_model_compute nlohmann_json::nlohmann_json)

# The batch-invariance and CPU-vs-reference checks once per OpenBLAS core type an x86-64-v3 host
# can select at run time (AVX2: Haswell, Zen; AVX-512: SkylakeX, Cooperlake), forced with
# OPENBLAS_CORETYPE, so a result that depends on the host's CPU model fails on any machine.
# tests/testing/openblas_core.cc checks the core in use and skips cores this CPU cannot run.
foreach(test cpu_kernels_test cpu_backend_test golden_test)
  target_sources(${test} PRIVATE ${PROJECT_SOURCE_DIR}/tests/testing/openblas_core.cc)
  target_link_libraries(${test} PRIVATE absl::strings)
  foreach(core Haswell Zen SkylakeX Cooperlake)
    add_test(NAME ${test}.openblas_${core} COMMAND ${test})
    set_tests_properties(${test}.openblas_${core} PROPERTIES
      ENVIRONMENT "OPENBLAS_CORETYPE=${core};LINSERVE_TEST_OPENBLAS_CORE=${core}"
      LABELS openblas_cores)
  endforeach()
endforeach()
set_tests_properties(golden_test.openblas_Haswell golden_test.openblas_Zen
                     golden_test.openblas_SkylakeX golden_test.openblas_Cooperlake
                     PROPERTIES FIXTURES_REQUIRED golden)
# Issue 26: the Based layer kinds on the CPU backend, and the CUDA backend's refusal of them.
linserve_test(based_kinds_test SOURCES based_kinds_test.cc
              LIBS linserve_model_compute linserve_testing nlohmann_json::nlohmann_json)
# Issue 28: weights stored int8 in the model file (reference/quantize_weights.py, which the test
# runs): the loader's refusals, the CPU backend's bitwise parity with load-time int8, the CUDA
# backend's refusal of the format.
linserve_test(stored_int8_test SOURCES stored_int8_test.cc
              LIBS linserve_model_compute linserve_testing LABELS python)
