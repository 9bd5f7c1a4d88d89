#!/usr/bin/env bash
# Sets up a new machine and runs the whole test suite (what CI runs, .ci/run):
#   1. installs the Debian packages (scripts/setup.sh);
#   2. cpu:   builds with CUDA off and runs every test (GPU tests are not built there);
#   3. cuda:  builds with CUDA on when nvcc is present (the CUDA sources must compile everywhere)
#             and runs its tests: the `gpu` ones skip themselves on a machine without a GPU; then
#             runs the GPU parity tests on the CPU under the CUDA emulation (kEmulatedTests);
#   4. container: builds the CPU image (and the CUDA one, from the cuda stage's build) from the
#             binaries already built and runs the deployments for real (docker/test.sh: serve,
#             compose + Prometheus, 3 replicas behind HAProxy with a replica stopped); skips
#             where no container engine can be set up;
#   5. asan:  ASan+UBSan build (gcc) of everything but the benchmarks; runs every C++ test
#             (kAsanExclude leaves out what it cannot or need not run);
#   6. tsan:  TSan build (gcc) of the tests whose threads share memory (tsan_tests), and runs them;
#   7. fuzz:  clang libFuzzer build of tests/fuzz; replays each seed corpus, then fuzzes each
#             target for LINSERVE_FUZZ_SECONDS (default 60) and prints its exec count.
# A sanitizer finding, a fuzzer crash or a failed check fails the stage; the script stops at the
# first failing stage. Each stage's time is printed at the end (docs/testing.md has the budget).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)

# Pure-Python tests of the PyTorch reference exercise no C++ of ours: the CPU stage runs them.
# integration_bundled_model_test and integration_prompt_cost_test serve the SentencePiece model
# over gRPC, which needs RTLD_DEEPBIND, which the sanitizers refuse
# (tests/sanitizers/dlopen_deepbind.cc); the second also measures RSS, which ASan's quarantine
# changes. The openai_ tests (the HTTP API through Node's openai client and curl) run the linserve
# binary on the bundled SentencePiece model for the same reason, and so do the structured-output
# ones (openai_structured_*); the cpu stage runs them (integration_openai_test runs the same front
# end in-process on a byte-tokenizer model, and the constraint tests under tests/server/constraints
# and engine_constraint_test run the matcher and the engine's constraint path, here too).
readonly kAsanExclude='^reference_|^integration_bundled_model_test$|^integration_prompt_cost_test$|^openai_(npm_install|client_test|choices_test|sse_test|concurrency_test|structured_test|structured_client_test)$'
# Threads sharing memory of ours: the kernels' thread pool (every weight format) and the CPU
# backend on it; the engine thread against its callers, session store and scheduler (fake
# backend); the engine thread against the device thread of the CPU stand-in for a GPU's timing
# (launch-ahead) and against its emitter threads (the sink calls); the persister's writer
# thread against the store reading records back; the load generator; the constraint cache and
# its masks shared by transport threads and the engine thread; a scored prompt's tokens handed to
# the emitter threads. Not
# the gRPC integration tests: gRPC hands work between its threads through synchronisation TSan
# cannot see in Debian's uninstrumented build (tests/sanitizers/README.md).
tsan_tests=(cpu_kernels_test weight_formats_test int8_linear_test cpu_backend_test engine_test engine_prefix_test session_store_test
            engine_rewind_test engine_state_dir_test scheduler_test session_persister_test
            session_tiers_test loadtest_generator_test compiled_constraint_test
            engine_constraint_test engine_prompt_logprobs_test engine_choices_test engine_overlap_test
            emitter_test)
kTsanTests="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
readonly kTsanTests
# The GPU tests run under the CUDA emulation (tests/gpu/emulation/README.md) in the cuda stage:
# every kernel's parity, the backend factory, and the whole-model parity of the CUDA backend
# against the CPU on every model variant (every layer kind alone and mixed; logits, chunked
# prefill in pieces, state moving between the backends). The rest of cuda_backend_test (batch
# invariance at 256, graphs, 1000-token decode, sampling) takes minutes more there and runs on
# a GPU, or by hand under the emulation.
readonly kEmulatedTests='CudaStatusTest.*:BackendFactoryTest.*:CudaKernelsTest.*:CudaBackendTest.ModelVariantsUseEveryLayerKind:CudaBackendTest.LogitsMatchCpu*:CudaBackendTest.LayerListPrefillInPieces*:CudaBackendTest.PrefillBatchEqualsEachSessionAloneAndTheCpu:CudaBackendTest.StateMovesBetweenCpuAndGpu:CudaBackendTest.TokenMasks*:CudaBackendTest.LogitBias*:CudaBackendTest.PenaltyCounts*:CudaBackendTest.OddVocabulary*:CudaBackendTest.Bf16State*:CudaBackendTest.GreedyDecodeOf1000*:CudaBackendTest.AMaskAllowingNoToken*:CudaBackendTest.Int8WeightsAreRefused*:CudaBackendTest.Int8FileFormatIsRefused:CudaBackendTest.TheUploadRefusesATensorOutsideItsKindsDeviceGroups:CudaBackendTest.LaunchAheadFeedsThePicksOfTheStepInFlight:CudaBackendTest.ASampledDecodeStepIsOneGraphLaunch:CudaBackendTest.AsynchronousReadsLandAsReadSlotWithoutWaitingForTheStep:CudaBackendTest.PrefillAndSampleLogprobsAndSeenCountsFollowTheContract:CudaBackendTest.AFewRowsRunWhatFollowsAProjectionInItsLaunch:CudaBackendTest.TheRotationTableIsFilledOnceNotEveryStep:CudaBackendTest.TheKernelAccountNamesEveryKernelAStepLaunches:CudaBackendTest.DependentLaunchesGiveBitwiseTheSerializedResults'

export ASAN_OPTIONS="detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

timings=()
print_timings() {
  ((${#timings[@]})) || return 0
  echo "test: stage times"
  printf '  %s\n' "${timings[@]}"
}
trap print_timings EXIT
stage() {  # stage NAME COMMAND...: runs COMMAND and records how long it took
  local name=$1 start=$SECONDS
  shift
  echo "test: ---- stage $name"
  "$@"
  local took=$((SECONDS - start))
  timings+=("$(printf '%-6s %3dm%02ds' "$name" $((took / 60)) $((took % 60)))")
}

# Prints each fuzz target's executions and new inputs, from the fuzz stage's ctest log.
fuzz_stats() {
  awk '/^[0-9]+\/[0-9]+ Test: / { name = ($3 ~ /_run$/) ? substr($3, 1, length($3) - 4) : "" }
       /^stat::number_of_executed_units:/ { execs = $2 }
       /^stat::new_units_added:/ {
         if (name != "") print "  " name ": " execs " execs, " $2 " new inputs" }' \
      "${1:-build/fuzz}/Testing/Temporary/LastTest.log"
}

cpu() {
  bash scripts/build.sh build/cpu -DLINSERVE_CUDA=OFF
  ctest --test-dir build/cpu --output-on-failure --timeout 900 -j "$jobs"
}
cuda() {
  bash scripts/build.sh build/cuda -DLINSERVE_CUDA=ON
  ctest --test-dir build/cuda --output-on-failure --timeout 900 -L gpu
  bash tests/gpu/emulation/run.sh build/cuda "--gtest_filter=$kEmulatedTests"
}
asan() {
  bash scripts/build.sh build/asan -DLINSERVE_SANITIZE=address,undefined
  ctest --test-dir build/asan --output-on-failure --timeout 900 -j "$jobs" -E "$kAsanExclude"
}
tsan() {
  bash scripts/build.sh build/tsan -DLINSERVE_SANITIZE=thread -- "${tsan_tests[@]}"
  ctest --test-dir build/tsan --output-on-failure --timeout 900 -j "$jobs" -R "$kTsanTests"
}
fuzz() {
  bash scripts/build.sh build/fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DLINSERVE_FUZZ=ON \
    "-DLINSERVE_FUZZ_SECONDS=${LINSERVE_FUZZ_SECONDS:-60}" -- linserve_fuzzers
  ctest --test-dir build/fuzz --output-on-failure --timeout 900 -j "$jobs" -L fuzz
  echo "test: fuzzing"
  fuzz_stats
}

stage setup bash scripts/setup.sh
stage cpu cpu
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  stage cuda cuda
else
  echo "test: no nvcc on this machine; the CUDA configuration was not built"
fi
stage container bash docker/test.sh
stage asan asan
stage tsan tsan
stage fuzz fuzz
