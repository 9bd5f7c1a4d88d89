// Causal linear attention (docs/architecture.md §4) over a recurrent state, per head:
//   S += φ(k) vᵀ,  z += φ(k),  o = φ(q)ᵀ S / (φ(q)ᵀ z + eps)
// State layout, per head: S (feature_dim × head_dim, row-major) then z (feature_dim); heads are
// consecutive, so one layer of one session is heads · feature_dim · (head_dim + 1) floats.
#ifndef LINSERVE_KERNELS_CPU_LINEAR_ATTENTION_H_
#define LINSERVE_KERNELS_CPU_LINEAR_ATTENTION_H_

#include <cstdint>

namespace linserve::cpu {

struct AttentionShape {
  int heads = 0;
  int feature_dim = 0;  // F: width of φ(q), φ(k)
  int head_dim = 0;     // Dh: width of v and of the output
  float eps = 0.0f;

  int64_t StateFloatsPerHead() const {
    return static_cast<int64_t>(feature_dim) * (head_dim + 1);
  }
  int64_t StateFloatsPerLayer() const { return heads * StateFloatsPerHead(); }
};

// One token for one head: updates S (F × Dh) and z (F) in place and writes o (Dh). Reads and
// writes S and z exactly once.
void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v, int feature_dim,
                         int head_dim, float eps, float* s, float* z, float* out);

// One decode step for a batch of sessions, every head of one layer:
//   phi_q, phi_k [batch · heads, F]; v, out [batch, heads · Dh];
//   states[b]: session b's state for this layer (StateFloatsPerLayer floats), all distinct.
// Parallel over (session, head) pairs on up to `num_threads` threads (ParallelFor); each pair's
// result is independent of the others and of the thread count.
void LinearAttentionDecode(const AttentionShape& shape, int batch, const float* phi_q,
                           const float* phi_k, const float* v, float* const* states, float* out,
                           int num_threads);

// Floats of scratch LinearAttentionChunk needs.
int64_t LinearAttentionChunkScratchFloats(int chunk, int num_threads);

// `chunk` consecutive tokens of one session through one layer, every head, in the
// chunked-parallel form: per head, with A = (φ(Q) φ(K)ᵀ) masked to j <= i,
//   out = (A V + φ(Q) S) / (A 1 + φ(Q) z + eps),  then S += φ(K)ᵀ V,  z += φ(K)ᵀ 1,
// which leaves the state feeding the tokens one at a time would (up to rounding).
//   phi_q, phi_k [chunk · heads, F]; v, out [chunk, heads · Dh]; state: StateFloatsPerLayer.
// Parallel over heads; OpenBLAS must be single-threaded (SetBlasThreads(1)) when
// num_threads > 1.
void LinearAttentionChunk(const AttentionShape& shape, int chunk, const float* phi_q,
                          const float* phi_k, const float* v, float* state, float* out,
                          float* scratch, int num_threads);

// One session's rows of a varlen prefill pass, and its layer state (StateFloatsPerLayer).
struct PrefillRows {
  int64_t first_row = 0;
  int rows = 0;
  float* state = nullptr;
};

// Every session of a prefill pass (varlen: `count` pieces, rows of phi_q, phi_k, v and out as
// in LinearAttentionChunk, states distinct), each in chunks of `chunk` rows from its first row:
// a chunk of one row is a decode step (bitwise LinearAttentionDecode's), a longer one
// LinearAttentionChunk's form. One parallel loop over (piece, head) pairs, each independent of
// the others and of the thread count: a piece's result is bitwise the same call's with that
// piece alone. Scratch: LinearAttentionChunkScratchFloats(chunk, num_threads); OpenBLAS must be
// single-threaded when num_threads > 1.
void LinearAttentionPrefill(const AttentionShape& shape, const PrefillRows* pieces, int count,
                            int chunk, const float* phi_q, const float* phi_k, const float* v,
                            float* out, float* scratch, int num_threads);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_LINEAR_ATTENTION_H_
