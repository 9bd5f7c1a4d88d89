// Sampling on the device, one block per row, following model/backend/sampler.h step by step.
//
// Why it is built this way: the host algorithm sorts the vocabulary (top-k, top-p), which a
// block cannot afford for 50k+ tokens every step. But every filter of the algorithm keeps a
// prefix of one total order — logits descending, ids ascending (the softmax, the min-p test and
// the renormalisations are all monotone in the logit) — so the survivors are always "every
// token ordered at or before a threshold (key, id)". The kernel finds that threshold instead
// of sorting: top-k by an 8-pass radix select on the 64-bit order key of the double logit,
// top-p by the same radix select with per-bucket probability mass, min-p by one min-reduction.
// The final draw walks the survivors in ascending id order with a block-wide prefix scan.
// That whole-row path is the exact fallback of a cheaper one: most rows' survivors lie among the
// few tokens near the maximum, so a second read of the row collects those (the candidate set,
// sampling.h), sorts them in shared memory and runs every step there; whenever a cut may lie
// outside the set the row takes the whole-row path instead, before its random draw. Greedy rows
// never come here: ArgmaxKernel reads their row once.
// A token mask (step 0) fits the same picture: a disallowed token's logit is -inf, the lowest
// key, and a masked row starts from the prefix of every key above it.
//
// Values are recomputed from the fp32 logits, the seen counts and the logit biases in every pass
// (bias, penalty and temperature are a few double operations; exp only where the mass is
// needed), which costs less than a [rows, vocab] double scratch would in memory traffic. Histograms of mass use 2^-60
// fixed point so that their atomics are exact and order-independent: the kernel is
// deterministic, and a CUDA graph replay draws the same tokens as an eager run.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/row_masks.cuh"
#include "kernels/cuda/sampling.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kArgmaxThreads = 512;
constexpr int kArgmaxUnroll = 4;  // ids a thread loads at once in FoldSegment
// A split row (ArgmaxSplits): about this many blocks for the whole batch (an H200 has 132 SMs,
// each holding 4 blocks of kArgmaxThreads), and segments of at least 2 ids per thread.
constexpr int kArgmaxBlocks = 256;
constexpr int kArgmaxMinSegment = 2 * kArgmaxThreads;
constexpr int kBuckets = 256;
constexpr double kMassScale = 1152921504606846976.0;  // 2^60
constexpr double kMinusInf = -static_cast<double>(INFINITY);

// Order key: a < b as doubles  <=>  Key(a) < Key(b) as unsigned integers (-0 folded into +0).
__device__ __forceinline__ uint64_t Key(double x) {
  if (x == 0.0) x = 0.0;
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(x));
  return (bits >> 63) != 0 ? ~bits : bits | 0x8000000000000000ULL;
}

// "token t survives": ordered at or before the threshold (key desc, id asc).
struct Threshold {
  uint64_t key;
  int id;
  __device__ bool Keeps(uint64_t k, int t) const { return k > key || (k == key && t <= id); }
};

// The shorter of two prefixes.
__device__ __forceinline__ Threshold Tighter(Threshold a, Threshold b) {
  return (b.key > a.key || (b.key == a.key && b.id < a.id)) ? b : a;
}

template <typename T>
__device__ __forceinline__ T BlockMin(T v, T* scratch, T highest) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : highest;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Inclusive prefix sum over threads in threadIdx order (fixed association); every thread gets
// its inclusive value, *total the block's sum.
template <typename T>
__device__ __forceinline__ T BlockInclusiveScan(T v, T* scratch, T* total) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? scratch[lane] : T(0);
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const T up = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += up;
    }
    if (lane < warps) scratch[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  if (warp > 0) v += scratch[warp - 1];
  *total = scratch[warps - 1];
  return v;
}

// Whether step 1 changes any logit: with r = 1 and both penalties 0 it is exactly the identity
// (l / 1, l * 1 and l - 0 are l), so the seen counts need not be read.
__device__ __forceinline__ bool UsesPenalty(const DeviceSamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
         p.frequency_penalty != 0.0f;
}

struct RowView {
  const float* logits;
  const int32_t* counts;
  const uint32_t* mask;  // nullptr: every token allowed
  const int32_t* biases;  // the slot's LogitBiasEntries(vocab), read when params.bias_count > 0
  DeviceSamplingParams params;
  int vocab;
  bool penalised;  // UsesPenalty(params): otherwise step 1 is the identity and counts go unread

  // Whether step 1 changes any logit.
  __device__ bool Adjusted() const { return penalised || params.bias_count > 0; }

  // Token t's logit bias (0 when it has none): its bit in the bitmask, then a binary search of
  // the ascending ids.
  __device__ double BiasOf(int t) const {
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(biases);
    if (((bits[t >> 5] >> (t & 31)) & 1u) == 0) return 0.0;
    const int32_t* tokens = biases + (vocab + 31) / 32;
    int lo = 0;
    int hi = params.bias_count - 1;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (tokens[mid] < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return static_cast<double>(__int_as_float(tokens[kMaxDeviceLogitBias + lo]));
  }

  // Steps 0 and 1: biased, penalised logit in double, -inf for a token the mask disallows.
  __device__ double Penalised(int t) const {
    if (!MaskAllows(mask, t)) return kMinusInf;
    double l = static_cast<double>(logits[t]);
    if (params.bias_count > 0) l += BiasOf(t);
    const int32_t c = penalised ? counts[t] : 0;
    if (c > 0) {
      const double r = static_cast<double>(params.repetition_penalty);
      l = l > 0.0 ? l / r : l * r;
      l -= static_cast<double>(params.presence_penalty) +
           static_cast<double>(params.frequency_penalty) * static_cast<double>(c);
    }
    return l;
  }
};

// This thread's contiguous id range, for passes that must follow id order.
__device__ __forceinline__ void ContiguousRange(int vocab, int* lo, int* hi) {
  const int per = (vocab + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  *lo = min(vocab, static_cast<int>(threadIdx.x) * per);
  *hi = min(vocab, *lo + per);
}

struct SharedState {
  unsigned int count[kBuckets];
  unsigned long long mass[kBuckets];
  double dscratch[32];
  int iscratch[32];
  uint64_t prefix;
  int need;
  int bucket;
  int flag;
  unsigned long long above;
  double u;
};

// The id of the n-th (1-based) token, in ascending id order, among those with eligible(t).
template <typename Eligible>
__device__ int NthEligibleId(int vocab, int n, Eligible eligible, SharedState& sh) {
  int lo, hi;
  ContiguousRange(vocab, &lo, &hi);
  int local = 0;
  for (int t = lo; t < hi; ++t) local += eligible(t) ? 1 : 0;
  int total;
  const int inclusive = BlockInclusiveScan(local, sh.iscratch, &total);
  const int before = inclusive - local;
  int found = INT_MAX;
  if (before < n && n <= inclusive) {
    int seen = before;
    for (int t = lo; t < hi; ++t) {
      if (eligible(t) && ++seen == n) {
        found = t;
        break;
      }
    }
  }
  return BlockMin(found, sh.iscratch, INT_MAX);
}

// Step 3: the tempered logit of token t.
struct TemperedLogits {
  RowView view;
  double temperature;
  __device__ double operator()(int t) const { return view.Penalised(t) / temperature; }
};

// The survivors' probabilities as the steps reshape them, from the tempered logit l:
// v1(l) = exp(l - m) / z1 after the softmax (step 5), divided by z2 once top-p has
// renormalised (step 7).
struct Distribution {
  double m = 0.0;  // the largest tempered logit
  double z1 = 1.0;
  double z2 = 1.0;
  // Whether step 7 applies (top_p < 1). Set before the steps, not where z2 is computed: as the
  // parameter's test it takes no register through the kernel (which otherwise spills one).
  bool renormalised = false;
  __device__ double V1(double l) const { return exp(l - m) / z1; }
  __device__ double Current(double l) const { return renormalised ? V1(l) / z2 : V1(l); }
};

// The largest tempered logit of the row.
__device__ double RowMax(const TemperedLogits& logit, int vocab, SharedState& sh) {
  double local_max = -DBL_MAX;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) local_max = fmax(local_max, logit(t));
  return BlockMax(local_max, sh.dscratch, -DBL_MAX);
}

// The sum of value(l) over the survivors of `keep`.
template <typename Value>
__device__ double SurvivorSum(const TemperedLogits& logit, Threshold keep, int vocab, Value value,
                              SharedState& sh) {
  double partial = 0.0;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
    const double l = logit(t);
    if (keep.Keeps(Key(l), t)) partial += value(l);
  }
  return BlockSum(partial, sh.dscratch);
}

// Step 4: the top_k-th token (0 < top_k < vocab) of the order, by radix select on the order key.
__device__ Threshold TopKThreshold(const TemperedLogits& logit, int vocab, int top_k,
                                   SharedState& sh) {
  uint64_t prefix = 0;
  uint64_t mask = 0;
  int need = top_k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) sh.count[b] = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
      const uint64_t k = Key(logit(t));
      if ((k & mask) == prefix) atomicAdd(&sh.count[(k >> shift) & 0xFF], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = kBuckets - 1;
      for (; b > 0; --b) {
        if (static_cast<int>(sh.count[b]) >= need) break;
        need -= static_cast<int>(sh.count[b]);
      }
      sh.prefix = prefix | (static_cast<uint64_t>(b) << shift);
      sh.need = need;
    }
    __syncthreads();
    prefix = sh.prefix;
    need = sh.need;
    mask |= 0xFFULL << shift;
  }
  const int id = NthEligibleId(
      vocab, need, [&](int t) { return Key(logit(t)) == prefix; }, sh);
  return Threshold{prefix, id};
}

// Step 6: min-p. p is monotone in l, so the survivors stay a prefix: the cut is at the
// smallest logit whose probability passes (all its ties pass with it).
__device__ Threshold MinPThreshold(const TemperedLogits& logit, Threshold keep,
                                   const Distribution& dist, float min_p, int vocab,
                                   SharedState& sh) {
  const double threshold = static_cast<double>(min_p) * (1.0 / dist.z1);
  double local_min = DBL_MAX;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
    const double l = logit(t);
    if (keep.Keeps(Key(l), t) && dist.V1(l) >= threshold) local_min = fmin(local_min, l);
  }
  const double l_min = BlockMin(local_min, sh.dscratch, DBL_MAX);
  return Threshold{Key(l_min), vocab - 1};
}

// Step 7 (after renormalising, dist.z2): the shortest prefix of `keep` whose mass reaches
// top_p, by radix select with per-bucket mass in 2^-60 fixed point; `keep` itself when rounding
// leaves the total below top_p.
__device__ Threshold TopPThreshold(const TemperedLogits& logit, Threshold keep,
                                   const Distribution& dist, float top_p, int vocab,
                                   SharedState& sh) {
  const unsigned long long target = __double2ull_rn(static_cast<double>(top_p) * kMassScale);
  uint64_t prefix = 0;
  uint64_t mask = 0;
  unsigned long long above = 0;  // mass ordered strictly before the current bucket range
  int chosen_bucket = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
      sh.count[b] = 0;
      sh.mass[b] = 0;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
      const double l = logit(t);
      const uint64_t k = Key(l);
      if ((k & mask) == prefix && keep.Keeps(k, t)) {
        const int b = static_cast<int>((k >> shift) & 0xFF);
        atomicAdd(&sh.count[b], 1u);
        atomicAdd(&sh.mass[b], __double2ull_rn(dist.V1(l) / dist.z2 * kMassScale));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      int lowest = -1;
      unsigned long long acc = above;
      for (int b = kBuckets - 1; b >= 0; --b) {
        if (sh.count[b] == 0) continue;
        lowest = b;
        if (acc + sh.mass[b] >= target) {
          chosen = b;
          break;
        }
        acc += sh.mass[b];
      }
      sh.flag = chosen < 0 ? 1 : 0;  // rounding left the total below top_p: keep everything
      sh.prefix = prefix | (static_cast<uint64_t>(chosen < 0 ? lowest : chosen) << shift);
      sh.above = acc;
      sh.bucket = chosen;
    }
    __syncthreads();
    if (sh.flag != 0) return keep;
    prefix = sh.prefix;
    above = sh.above;
    chosen_bucket = sh.bucket;
    mask |= 0xFFULL << shift;
  }
  // Every tie at the crossing key has the same mass; take as many, in ascending id, as the
  // cumulative sum needs to reach top_p.
  const unsigned int ties = sh.count[chosen_bucket];
  const unsigned long long each = sh.mass[chosen_bucket] / ties;
  unsigned long long wanted = ties;
  if (each > 0) wanted = (target - above + each - 1) / each;
  wanted = min(max(wanted, 1ULL), static_cast<unsigned long long>(ties));
  const int id = NthEligibleId(
      vocab, static_cast<int>(wanted),
      [&](int t) {
        const uint64_t k = Key(logit(t));
        return k == prefix && keep.Keeps(k, t);
      },
      sh);
  return Tighter(keep, Threshold{prefix, id});
}

// Step 8's draw: u uniform in [0, 1) from the generator rngs[slot], 53 bits.
__device__ double Uniform(Mt19937_64* rngs, int slot, SharedState& sh) {
  if (threadIdx.x == 0) {
    Mt19937_64& rng = rngs[slot];
    sh.u = static_cast<double>(rng.Next() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
  }
  __syncthreads();
  return sh.u;
}

// Step 8's walk: the first survivor, in ascending id order, at which the cumulative
// probability (renormalised by z3) passes u.
__device__ int InverseCdf(const TemperedLogits& logit, Threshold keep, const Distribution& dist,
                          double z3, double u, int vocab, SharedState& sh) {
  int lo, hi;
  ContiguousRange(vocab, &lo, &hi);
  double local = 0.0;
  int last_survivor = -1;
  for (int t = lo; t < hi; ++t) {
    const double l = logit(t);
    if (keep.Keeps(Key(l), t)) {
      local += dist.Current(l) / z3;
      last_survivor = t;
    }
  }
  double total;
  const double inclusive = BlockInclusiveScan(local, sh.dscratch, &total);
  const int crossing =
      BlockMin(inclusive > u ? static_cast<int>(threadIdx.x) : INT_MAX, sh.iscratch, INT_MAX);
  int found = INT_MAX;
  if (static_cast<int>(threadIdx.x) == crossing) {
    double cumulative = inclusive - local;
    found = last_survivor;
    for (int t = lo; t < hi; ++t) {
      const double l = logit(t);
      if (!keep.Keeps(Key(l), t)) continue;
      cumulative += dist.Current(l) / z3;
      if (cumulative > u) {
        found = t;
        break;
      }
    }
  }
  found = BlockMin(found, sh.iscratch, INT_MAX);
  if (found == INT_MAX) {
    // The draw lies at or above the rounded total: the last survivor.
    found = BlockMax(last_survivor, sh.iscratch, -1);
  }
  return found;
}

// Steps 3 to 8 over the whole row, the exact path: every filter's cut by radix select, every
// sum over the row. dist.m is set.
__device__ int WholeRowDraw(const RowView& view, const TemperedLogits& logit, Distribution dist,
                            Mt19937_64* rngs, int slot, SharedState& sh) {
  const DeviceSamplingParams& p = view.params;
  const int vocab = view.vocab;
  // Everything, or under a mask every key above -inf's (the allowed tokens).
  Threshold keep = view.mask == nullptr ? Threshold{0, vocab - 1} : Threshold{Key(kMinusInf), -1};
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = Tighter(keep, TopKThreshold(logit, vocab, p.top_k, sh));
  }
  // Step 5: softmax over the survivors.
  dist.z1 = SurvivorSum(
      logit, keep, vocab, [&](double l) { return exp(l - dist.m); }, sh);
  if (p.min_p > 0.0f) keep = Tighter(keep, MinPThreshold(logit, keep, dist, p.min_p, vocab, sh));
  if (dist.renormalised) {
    dist.z2 = SurvivorSum(
        logit, keep, vocab, [&](double l) { return dist.V1(l); }, sh);
    keep = TopPThreshold(logit, keep, dist, p.top_p, vocab, sh);
  }
  // Step 8: renormalise over the survivors and walk them in ascending id order.
  const double z3 = SurvivorSum(
      logit, keep, vocab, [&](double l) { return dist.Current(l); }, sh);
  const double u = Uniform(rngs, slot, sh);
  return InverseCdf(logit, keep, dist, z3, u, vocab, sh);
}

// The candidate set: every allowed token whose tempered logit is at least
// m - kSampleCandidateSpan, when there are at most kSampleCandidates of them. It is a prefix of
// the order (logit desc, id asc) that holds all ties at its end, so each filter's cut, when it
// falls inside the set, is found there; a cut that may fall outside sends the row to the
// whole-row path before the draw.
struct Candidates {
  double l[kSampleCandidates];
  int id[kSampleCandidates];
  int found;     // allowed tokens at or above the span (may exceed kSampleCandidates)
  int allowed;   // allowed tokens of the row
  int unusual;   // a NaN logit, or no finite maximum: the whole-row path decides
};

// a before b in the order (logit desc, id asc); padding (id INT_MAX, -inf) comes last.
__device__ __forceinline__ bool RanksBefore(double la, int ia, double lb, int ib) {
  const uint64_t ka = Key(la);
  const uint64_t kb = Key(lb);
  return ka > kb || (ka == kb && ia < ib);
}

// Bitonic sort of c[0, n) (n <= kSampleCandidates) by `before`, entries [n, pow2) padded with
// (-inf, INT_MAX), which every comparator here puts last.
template <typename Before>
__device__ void SortCandidates(Candidates& c, int n, Before before) {
  int size = 2;
  while (size < n) size <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += blockDim.x) {
    c.l[i] = kMinusInf;
    c.id[i] = INT_MAX;
  }
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int partner = i ^ j;
        if (partner <= i) continue;
        const bool up = (i & k) == 0;
        const bool swap = up ? before(c.l[partner], c.id[partner], c.l[i], c.id[i])
                             : before(c.l[i], c.id[i], c.l[partner], c.id[partner]);
        if (swap) {
          const double l = c.l[i];
          const int id = c.id[i];
          c.l[i] = c.l[partner];
          c.id[i] = c.id[partner];
          c.l[partner] = l;
          c.id[partner] = id;
        }
      }
      __syncthreads();
    }
  }
}

// The 1-based position, in c[0, n), of the first entry at which the running sum of value(i) in
// index order reaches `target` (>= when inclusive_ge, > otherwise); 0 when none does.
template <typename Value>
__device__ int FirstCrossing(int n, Value value, double target, bool inclusive_ge,
                             SharedState& sh) {
  int lo, hi;
  ContiguousRange(n, &lo, &hi);
  double local = 0.0;
  for (int i = lo; i < hi; ++i) local += value(i);
  double total;
  const double inclusive = BlockInclusiveScan(local, sh.dscratch, &total);
  const bool crosses = inclusive_ge ? inclusive >= target : inclusive > target;
  const int crossing =
      BlockMin(crosses && hi > lo ? static_cast<int>(threadIdx.x) : INT_MAX, sh.iscratch, INT_MAX);
  int found = INT_MAX;
  if (static_cast<int>(threadIdx.x) == crossing) {
    double cumulative = inclusive - local;
    found = hi;
    for (int i = lo; i < hi; ++i) {
      cumulative += value(i);
      if (inclusive_ge ? cumulative >= target : cumulative > target) {
        found = i + 1;
        break;
      }
    }
  }
  found = BlockMin(found, sh.iscratch, INT_MAX);
  return found == INT_MAX ? 0 : found;
}

// Steps 3 to 8 on the candidate set; false (before any draw) when a cut may lie outside it.
// dist.m is set.
__device__ bool CandidateDraw(const RowView& view, const TemperedLogits& logit, Distribution dist,
                              Mt19937_64* rngs, int slot, SharedState& sh, Candidates& c,
                              int* token) {
  const DeviceSamplingParams& p = view.params;
  const int vocab = view.vocab;
  if (threadIdx.x == 0) {
    c.found = 0;
    c.allowed = 0;
    c.unusual = isfinite(dist.m) ? 0 : 1;
  }
  __syncthreads();
  // One pass: collect, count the allowed tokens, and the softmax denominator over all of them
  // (step 5's when no filter before it closes the set).
  const double floor = dist.m - kSampleCandidateSpan;
  double z_all = 0.0;
  int allowed = 0;
  bool unusual = false;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
    if (!MaskAllows(view.mask, t)) continue;
    const double l = logit(t);
    ++allowed;
    unusual = unusual || isnan(l);
    z_all += exp(l - dist.m);
    if (l >= floor) {
      const int at = atomicAdd(&c.found, 1);
      if (at < kSampleCandidates) {
        c.l[at] = l;
        c.id[at] = t;
      }
    }
  }
  allowed = BlockSum(allowed, sh.iscratch);
  z_all = BlockSum(z_all, sh.dscratch);
  if (unusual) c.unusual = 1;  // every writer writes 1
  __syncthreads();
  const int found = c.found;
  if (c.unusual != 0 || found > kSampleCandidates) return false;
  SortCandidates(c, found, [](double la, int ia, double lb, int ib) {
    return RanksBefore(la, ia, lb, ib);
  });
  // The survivors are c[0, size) when `closed`, else c[0, found) and every allowed token below.
  int size = found;
  bool closed = found == allowed;
  // Step 4.
  if (p.top_k > 0 && p.top_k < allowed) {
    if (p.top_k > found) return false;
    size = p.top_k;
    closed = true;
  }
  // Step 5.
  if (closed) {
    double partial = 0.0;
    for (int i = threadIdx.x; i < size; i += blockDim.x) partial += exp(c.l[i] - dist.m);
    dist.z1 = BlockSum(partial, sh.dscratch);
  } else {
    dist.z1 = z_all;
  }
  // Step 6: the survivors passing min-p are a prefix (p is monotone in l).
  if (p.min_p > 0.0f) {
    const double threshold = static_cast<double>(p.min_p) * (1.0 / dist.z1);
    int passing = 0;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {
      if (dist.V1(c.l[i]) >= threshold) passing = max(passing, i + 1);
    }
    passing = BlockMax(passing, sh.iscratch, 0);
    // Ties at the cut pass together; when the last candidate passes, tokens below may too.
    if (!closed && passing == size) return false;
    size = passing;
    closed = true;
  }
  // Step 7: the shortest prefix whose cumulative probability reaches top_p.
  if (dist.renormalised) {
    if (closed) {
      double partial = 0.0;
      for (int i = threadIdx.x; i < size; i += blockDim.x) partial += dist.V1(c.l[i]);
      dist.z2 = BlockSum(partial, sh.dscratch);
    } else {
      const Threshold all =
          view.mask == nullptr ? Threshold{0, vocab - 1} : Threshold{Key(kMinusInf), -1};
      dist.z2 = SurvivorSum(
          logit, all, vocab, [&](double l) { return dist.V1(l); }, sh);
    }
    const double top_p = static_cast<double>(p.top_p);
    const int cut = FirstCrossing(
        size, [&](int i) { return dist.V1(c.l[i]) / dist.z2; }, top_p, /*inclusive_ge=*/true,
        sh);
    if (cut == 0 && !closed) return false;
    // cut 0 in a closed set: rounding left the total below top_p, every survivor stays.
    if (cut > 0) {
      // Every tie of the cut's logit has the same probability: the host takes them in id order,
      // as the sort does, so the prefix ends at the cut itself.
      size = cut;
    }
    closed = true;
  }
  if (!closed) return false;
  // Step 8: renormalise over c[0, size) and walk it in ascending id order.
  SortCandidates(c, size, [](double, int ia, double, int ib) { return ia < ib; });
  double partial = 0.0;
  for (int i = threadIdx.x; i < size; i += blockDim.x) partial += dist.Current(c.l[i]);
  const double z3 = BlockSum(partial, sh.dscratch);
  const double u = Uniform(rngs, slot, sh);
  const int at = FirstCrossing(
      size, [&](int i) { return dist.Current(c.l[i]) / z3; }, u, /*inclusive_ge=*/false, sh);
  // The draw at or above the rounded total: the last survivor.
  *token = c.id[at == 0 ? size - 1 : at - 1];
  return true;
}

// Steps 3 to 8 for a row whose temperature is not 0: the candidate set when it holds every
// cut, the whole row otherwise.
__device__ int DrawToken(const RowView& view, Mt19937_64* rngs, int slot, SharedState& sh,
                         Candidates& c) {
  const TemperedLogits logit{view, static_cast<double>(view.params.temperature)};
  Distribution dist;
  dist.renormalised = view.params.top_p < 1.0f;
  dist.m = RowMax(logit, view.vocab, sh);
  int token;
  if (CandidateDraw(view, logit, dist, rngs, slot, sh, c, &token)) return token;
  return WholeRowDraw(view, logit, dist, rngs, slot, sh);
}

__device__ __forceinline__ RowView ViewOfRow(const SampleArgs& args, int row, int slot) {
  const DeviceSamplingParams& params = args.state.params[slot];
  const int64_t stride = args.logits_stride == 0 ? args.vocab : args.logits_stride;
  return RowView{args.logits + static_cast<int64_t>(row) * stride,
                 args.state.seen_counts + static_cast<int64_t>(slot) * args.vocab,
                 MaskOfRow(args.masks, row),
                 args.state.biases + static_cast<int64_t>(slot) * LogitBiasEntries(args.vocab),
                 params, args.vocab, UsesPenalty(params)};
}

// Writes a row's pick and counts it as seen (thread 0).
__device__ __forceinline__ void Emit(const SampleArgs& args, int row, int slot, int token) {
  if (threadIdx.x == 0) {
    args.tokens[row] = token;
    args.state.seen_counts[static_cast<int64_t>(slot) * args.vocab + token] += 1;
  }
}

// Step 2 over one row in one read of it: the host's fold "the first allowed token, replaced by
// each later one whose logit is strictly greater". Each thread folds its strided ids (ascending)
// skipping NaN, the block takes the largest value and the lowest id holding it; that is the
// host's pick unless the first allowed token's logit is NaN, which the host never replaces.
// `value` is the biased, penalised logit, in float when step 1 is the identity (float to double is
// exact and monotone, so the comparisons are the double ones).
// A thread reads kArgmaxUnroll of its ids before folding them (in ascending order, so the fold
// is the same): a row is one long chain of dependent loads otherwise, which kept a single row
// (batch 1) at 23 µs on an H200 (bench/results/gpu.md).
// A small batch's row is split into args.argmax_splits segments, one block each (grid y): each
// folds its segment the same way and publishes (first allowed id, largest value, lowest id
// holding it); the row's last block to arrive combines them — the lowest first allowed id, the
// largest value, the lowest id holding it: the whole row's fold, whatever the segments — and
// picks. Only a batch of few rows is split, where one block per row leaves most SMs idle.

// One segment's fold; every thread of the block gets it. top_id INT_MAX: no allowed non-NaN
// value in the segment (top is then -inf); first_allowed INT_MAX: no allowed token.
template <typename T>
struct SegmentFold {
  int first_allowed;
  T top;
  int top_id;
};

template <typename T, typename Value>
__device__ SegmentFold<T> FoldSegment(const RowView& view, Value value, int begin, int end,
                                      T* scratch, int* iscratch) {
  T best = -static_cast<T>(INFINITY);
  int best_id = INT_MAX;
  int first_allowed = INT_MAX;
  auto fold = [&](int t, T l) {
    if (!MaskAllows(view.mask, t)) return;
    if (first_allowed == INT_MAX) first_allowed = t;
    if (l > best || (best_id == INT_MAX && l == best)) {
      best = l;
      best_id = t;
    }
  };
  const int stride = static_cast<int>(blockDim.x);
  int t = begin + static_cast<int>(threadIdx.x);
  for (; t + (kArgmaxUnroll - 1) * stride < end; t += kArgmaxUnroll * stride) {
    T l[kArgmaxUnroll];
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) l[u] = value(t + u * stride);
#pragma unroll
    for (int u = 0; u < kArgmaxUnroll; ++u) fold(t + u * stride, l[u]);
  }
  for (; t < end; t += stride) fold(t, value(t));
  SegmentFold<T> out;
  out.first_allowed = BlockMin(first_allowed, iscratch, INT_MAX);
  out.top = BlockMax(best, scratch, -static_cast<T>(INFINITY));
  out.top_id =
      BlockMin(best_id != INT_MAX && best == out.top ? best_id : INT_MAX, iscratch, INT_MAX);
  return out;
}

// The row's pick from the whole row's fold. No allowed token (a mask the caller refuses):
// token 0, as the host.
template <typename T, typename Value>
__device__ int PickOfFold(const SegmentFold<T>& fold, Value value) {
  if (fold.first_allowed == INT_MAX) return 0;
  if (isnan(value(fold.first_allowed))) return fold.first_allowed;
  return fold.top_id;
}

template <typename T, typename Value>
__device__ void ArgmaxOfRow(const SampleArgs& args, const RowView& view, int row, int slot,
                            Value value, T* scratch, int* iscratch) {
  const int splits = static_cast<int>(gridDim.y);
  const int segment = (view.vocab + splits - 1) / splits;
  const int begin = min(view.vocab, static_cast<int>(blockIdx.y) * segment);
  const SegmentFold<T> fold =
      FoldSegment<T>(view, value, begin, min(view.vocab, begin + segment), scratch, iscratch);
  if (splits == 1) {
    Emit(args, row, slot, PickOfFold(fold, value));
    return;
  }
  if (threadIdx.x != 0) return;
  ArgmaxPartial* partials = args.argmax.partials + static_cast<int64_t>(row) * kMaxArgmaxSplits;
  partials[blockIdx.y] =
      ArgmaxPartial{static_cast<double>(fold.top), fold.top_id, fold.first_allowed};
  // The partial is visible device-wide before the arrival that counts it.
  __threadfence();
  if (atomicAdd(&args.argmax.arrivals[row], 1u) != static_cast<unsigned>(splits - 1)) return;
  __threadfence();
  args.argmax.arrivals[row] = 0;  // ready for the next launch (and graph replay)
  SegmentFold<double> whole{INT_MAX, -static_cast<double>(INFINITY), INT_MAX};
  for (int s = 0; s < splits; ++s) {
    // volatile: the other blocks' writes, never a stale cached copy.
    const volatile ArgmaxPartial& p = partials[s];
    const double top = p.top;
    const int top_id = p.top_id;
    whole.first_allowed = min(whole.first_allowed, static_cast<int>(p.first_allowed));
    if (top_id == INT_MAX) continue;
    if (top > whole.top || (top == whole.top && top_id < whole.top_id)) {
      whole.top = top;
      whole.top_id = top_id;
    }
  }
  Emit(args, row, slot, PickOfFold(whole, value));
}

// Greedy rows (temperature 0); the other rows are SampleKernel's. Grid (rows, argmax_splits).
__global__ void __launch_bounds__(kArgmaxThreads) ArgmaxKernel(SampleArgs args) {
  AfterPriorKernel();
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  __shared__ int iscratch[32];
  const int row = blockIdx.x;
  const int slot = args.slots[row];
  if (slot < 0 || args.state.params[slot].temperature != 0.0f) return;
  const RowView view = ViewOfRow(args, row, slot);
  if (view.Adjusted()) {
    ArgmaxOfRow<double>(
        args, view, row, slot, [&](int t) { return view.Penalised(t); }, dscratch, iscratch);
  } else {
    ArgmaxOfRow<float>(
        args, view, row, slot, [&](int t) { return view.logits[t]; }, fscratch, iscratch);
  }
}

// Rows with a temperature (steps 3 to 8); greedy rows are ArgmaxKernel's.
__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs args) {
  AfterPriorKernel();
  __shared__ SharedState sh;
  __shared__ Candidates candidates;
  const int row = blockIdx.x;
  const int slot = args.slots[row];
  if (slot < 0 || args.state.params[slot].temperature == 0.0f) return;
  const RowView view = ViewOfRow(args, row, slot);
  Emit(args, row, slot, DrawToken(view, args.state.rngs, slot, sh, candidates));
}

__global__ void StartSamplingKernel(SamplerSlots state, int32_t slot,
                                    DeviceSamplingParams params, uint64_t seed) {
  AfterPriorKernel();
  if (threadIdx.x != 0) return;  // one warp, one worker: the seeding is sequential
  state.params[slot] = params;
  state.rngs[slot].Seed(seed);
}

__global__ void CountTokensKernel(const int32_t* tokens, int n, int vocab, int32_t slot,
                                  int32_t* seen_counts) {
  AfterPriorKernel();
  int32_t* counts = seen_counts + static_cast<int64_t>(slot) * vocab;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&counts[tokens[i]], 1);
  }
}

}  // namespace

absl::Status LaunchSample(cudaStream_t stream, const SampleArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  if (args.vocab < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: vocab ", args.vocab, " < 1"));
  }
  if (args.logits_stride != 0 && args.logits_stride < args.vocab) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: logits_stride ", args.logits_stride,
                                                   " is neither 0 nor >= vocab ", args.vocab));
  }
  if (args.argmax_splits < 1 || args.argmax_splits > kMaxArgmaxSplits ||
      (args.argmax_splits > 1 && (args.rows > kArgmaxSplitRows || args.argmax.partials == nullptr ||
                                  args.argmax.arrivals == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: argmax_splits ", args.argmax_splits, " is not in [1, ", kMaxArgmaxSplits,
        "], or splits ", args.rows, " rows (at most ", kArgmaxSplitRows, ") without scratch"));
  }
  if (args.any_greedy) {
    LaunchDependent(ArgmaxKernel, dim3(args.rows, args.argmax_splits), kArgmaxThreads, 0, stream,
                    args);
    LINSERVE_RETURN_IF_ERROR(LaunchStatus("ArgmaxKernel", __FILE__, __LINE__));
  }
  if (!args.any_sampled) return absl::OkStatus();
  LaunchDependent(SampleKernel, args.rows, kThreads, 0, stream, args);
  return LaunchStatus("SampleKernel", __FILE__, __LINE__);
}

int ArgmaxSplits(int rows, int vocab) {
  if (rows < 1 || rows > kArgmaxSplitRows) return 1;
  const int by_segment = (vocab + kArgmaxMinSegment - 1) / kArgmaxMinSegment;
  return std::max(1, std::min({kMaxArgmaxSplits, kArgmaxBlocks / rows, by_segment}));
}

absl::Status LaunchStartSampling(cudaStream_t stream, const SamplerSlots& state, int32_t slot,
                                 const DeviceSamplingParams& params, uint64_t seed) {
  LaunchDependent(StartSamplingKernel, 1, 32, 0, stream, state, slot, params, seed);
  return LaunchStatus("StartSamplingKernel", __FILE__, __LINE__);
}

absl::Status LaunchCountTokens(cudaStream_t stream, const int32_t* tokens, int n, int vocab,
                               int32_t slot, int32_t* seen_counts) {
  if (n <= 0) return absl::OkStatus();
  constexpr int kCountThreads = 256;
  const int blocks = std::min((n + kCountThreads - 1) / kCountThreads, 1024);
  LaunchDependent(CountTokensKernel, blocks, kCountThreads, 0, stream, tokens, n, vocab, slot,
                  seen_counts);
  return LaunchStatus("CountTokensKernel", __FILE__, __LINE__);
}

}  // namespace linserve::cuda
