# Kernels, the CPU backend, the sampler and linserve-generate.
linserve_test(cpu_kernels_test SOURCES cpu_kernels_test.cc LIBS linserve_kernels_cpu)
linserve_test(cpu_backend_test SOURCES cpu_backend_test.cc
              LIBS linserve_model_compute linserve_testing)
linserve_test(sampler_test SOURCES sampler_test.cc LIBS linserve_model_compute)
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
