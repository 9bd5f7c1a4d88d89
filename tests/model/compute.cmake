# Kernels, the CPU backend, the sampler and linserve-generate.
linserve_test(cpu_kernels_test SOURCES cpu_kernels_test.cc LIBS linserve_kernels_cpu)
