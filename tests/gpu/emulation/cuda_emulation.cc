// The fiber scheduler behind cuda_emulation.h (x86-64 System V only: the context switch saves
// the callee-saved registers by hand, which is ~100x faster than swapcontext's signal-mask
// system calls).
#include "tests/gpu/emulation/cuda_emulation.h"
#include "tests/gpu/emulation/launch_log.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern "C" void emu_switch_stack(void** save_sp, void* load_sp);
asm(R"(
.text
.globl emu_switch_stack
.type emu_switch_stack,@function
emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
)");

namespace emu {

namespace {

std::mutex g_log_mutex;
std::map<std::string, int64_t> g_launch_log;  // runs per kernel name
int64_t g_dependent_runs = 0;

void LogRun(const std::string& kernel, bool dependent) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  ++g_launch_log[kernel];
  if (dependent) ++g_dependent_runs;
}

}  // namespace

int64_t KernelRuns(const char* kernel) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  const auto it = g_launch_log.find(kernel);
  return it == g_launch_log.end() ? 0 : it->second;
}

std::map<std::string, int64_t> KernelRunCounts() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return g_launch_log;
}

int64_t DependentKernelRuns() {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  return g_dependent_runs;
}

dim3 g_thread_idx, g_block_idx, g_block_dim, g_grid_dim;

// Defined in fake_cuda_runtime.cc: records `op` when `stream` is being captured.
bool RecordIfCapturing(cudaStream_t stream, const std::function<void()>& op);

namespace {

enum class FiberState { kRunnable, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  void* sp = nullptr;
  std::vector<char> stack;
  FiberState state = FiberState::kRunnable;
  unsigned index = 0;
  bool waited = false;  // has called cudaGridDependencySynchronize
};

constexpr size_t kStackBytes = 256 * 1024;

void* g_scheduler_sp = nullptr;
std::vector<Fiber> g_fibers;
int g_current = -1;
const std::function<void()>* g_body = nullptr;
std::vector<char> g_dynamic_shared;
std::vector<uint64_t> g_exchange;
std::vector<int> g_warp_arrivals;
int g_block_arrivals = 0;
int g_live = 0;
unsigned g_blocks_run = 0;
const char* g_kernel = nullptr;  // the running launch's kernel
bool g_dependent = false;        // whether it was launched as a programmatic dependent

void Yield() { emu_switch_stack(&g_fibers[g_current].sp, g_scheduler_sp); }

void ReleaseBlockBarrierIfComplete() {
  if (g_live > 0 && g_block_arrivals == g_live) {
    g_block_arrivals = 0;
    for (Fiber& f : g_fibers) {
      if (f.state == FiberState::kAtBlockBarrier) f.state = FiberState::kRunnable;
    }
  }
}

[[noreturn]] void FiberEntry() {
  (*g_body)();
  if (g_dependent && !g_fibers[g_current].waited) {
    std::fprintf(stderr,
                 "emulation: a thread of %s, launched as a programmatic dependent, ended without "
                 "waiting for the kernel before it (AfterPriorKernel)\n",
                 g_kernel);
    std::abort();
  }
  g_fibers[g_current].state = FiberState::kDone;
  --g_live;
  ReleaseBlockBarrierIfComplete();  // an exited thread no longer holds a barrier back
  Yield();
  std::abort();  // a finished fiber is never resumed
}

void RunBlock(dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  if (block.x % 32 != 0 || block.y != 1 || block.z != 1) {
    std::fprintf(stderr, "emulation: blocks must be one-dimensional whole warps (got %u)\n",
                 block.x);
    std::abort();
  }
  const int n = static_cast<int>(block.x);
  g_fibers.resize(static_cast<size_t>(n));
  g_exchange.assign(static_cast<size_t>(n), 0);
  g_warp_arrivals.assign(static_cast<size_t>(n / 32), 0);
  g_block_arrivals = 0;
  g_live = n;
  g_body = &body;
  g_dynamic_shared.assign(std::max<size_t>(shared_bytes, 16), static_cast<char>(0xFF));
  for (int i = 0; i < n; ++i) {
    Fiber& f = g_fibers[static_cast<size_t>(i)];
    if (f.stack.empty()) f.stack.resize(kStackBytes);
    uintptr_t top = reinterpret_cast<uintptr_t>(f.stack.data() + f.stack.size());
    top &= ~uintptr_t{15};
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;                               // rsp % 16 == 8 at FiberEntry
    *--sp = reinterpret_cast<void*>(&FiberEntry);  // the `ret` of the first switch
    for (int r = 0; r < 6; ++r) *--sp = nullptr;   // rbp rbx r12 r13 r14 r15
    f.sp = sp;
    f.state = FiberState::kRunnable;
    f.index = static_cast<unsigned>(i);
    f.waited = false;
  }
  // Between barriers the runnable threads run one after another, forwards in one block and
  // backwards in the next: a read of shared data without the barrier that orders it after its
  // write then sees a stale value in one of the two orders.
  const bool reverse = (g_blocks_run++ & 1) != 0;
  while (g_live > 0) {
    bool progressed = false;
    for (int k = 0; k < n; ++k) {
      const int i = reverse ? n - 1 - k : k;
      if (g_fibers[static_cast<size_t>(i)].state != FiberState::kRunnable) continue;
      g_current = i;
      g_thread_idx = dim3(g_fibers[static_cast<size_t>(i)].index, 0, 0);
      emu_switch_stack(&g_scheduler_sp, g_fibers[static_cast<size_t>(i)].sp);
      progressed = true;
    }
    if (!progressed) {
      std::fprintf(stderr, "emulation: deadlock: a barrier is not reached by every thread\n");
      std::abort();
    }
  }
}

}  // namespace

void SyncThreads() {
  g_fibers[g_current].state = FiberState::kAtBlockBarrier;
  ++g_block_arrivals;
  ReleaseBlockBarrierIfComplete();
  Yield();
}

void SyncWarp() {
  const int warp = static_cast<int>(g_thread_idx.x >> 5);
  g_fibers[g_current].state = FiberState::kAtWarpBarrier;
  if (++g_warp_arrivals[static_cast<size_t>(warp)] == 32) {
    g_warp_arrivals[static_cast<size_t>(warp)] = 0;
    for (int lane = 0; lane < 32; ++lane) {
      Fiber& f = g_fibers[static_cast<size_t>(warp * 32 + lane)];
      if (f.state == FiberState::kAtWarpBarrier) f.state = FiberState::kRunnable;
    }
  }
  Yield();
}

void WaitForPriorKernel() { g_fibers[g_current].waited = true; }

void LetNextKernelStart() {
  if (!g_fibers[g_current].waited) {
    std::fprintf(stderr,
                 "emulation: a thread of %s lets the next kernel start before it has waited for "
                 "the kernel before it\n",
                 g_kernel);
    std::abort();
  }
}

void* DynamicSharedMemory() { return g_dynamic_shared.data(); }

uint64_t* WarpExchange() { return &g_exchange[(g_thread_idx.x >> 5) * 32]; }

void Launch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            std::function<void()> body, bool dependent) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
      block.x == 0 || block.x > 1024 || shared_bytes > 227 * 1024) {
    std::fprintf(stderr, "emulation: invalid launch: grid (%u, %u, %u), block %u, %zu B shared\n",
                 grid.x, grid.y, grid.z, block.x, shared_bytes);
    std::abort();
  }
  std::function<void()> run = [name = std::string(kernel), grid, block, shared_bytes, body,
                               dependent] {
    LogRun(name, dependent);
    g_kernel = name.c_str();
    g_dependent = dependent;
    g_grid_dim = grid;
    g_block_dim = block;
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          g_block_idx = dim3(x, y, z);
          RunBlock(block, shared_bytes, body);
        }
      }
    }
  };
  if (!RecordIfCapturing(stream, run)) run();
}

}  // namespace emu
