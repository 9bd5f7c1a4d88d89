// Decode is bandwidth-bound on the state: each (session, head) owns F · (Dh + 1) floats that must
// be read and written once per token, so LinearAttentionStep fuses the update and the read-out
// into one pass over S (row f: S_f += φk_f · v, then o += φq_f · S_f while the row is in
// registers) instead of the textbook two. Sessions × heads are independent, which is the
// parallel axis. Prefill instead has a whole chunk of tokens per head, so it is recast as small
// GEMMs (the intra-chunk causal product plus the carried state) and handed to OpenBLAS, one head
// per thread: the state is read and written once per chunk rather than once per token.
#include "kernels/cpu/linear_attention.h"

#include <algorithm>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/threads.h"

namespace linserve::cpu {

void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v, int feature_dim,
                         int head_dim, float eps, float* s, float* z, float* out) {
  std::fill(out, out + head_dim, 0.0f);
  float den = 0.0f;
  for (int f = 0; f < feature_dim; ++f) {
    const float kf = phi_k[f];
    const float qf = phi_q[f];
    float* sf = s + static_cast<int64_t>(f) * head_dim;
#pragma omp simd
    for (int d = 0; d < head_dim; ++d) {
      sf[d] += kf * v[d];
      out[d] += qf * sf[d];
    }
    z[f] += kf;
    den += qf * z[f];
  }
  const float inv = 1.0f / (den + eps);
#pragma omp simd
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

void LinearAttentionDecode(const AttentionShape& shape, int batch, const float* phi_q,
                           const float* phi_k, const float* v, float* const* states, float* out,
                           int num_threads) {
  const int64_t pairs = static_cast<int64_t>(batch) * shape.heads;
  const int64_t hd = static_cast<int64_t>(shape.heads) * shape.head_dim;
  const int threads = static_cast<int>(std::min<int64_t>(
      ThreadsForWork(num_threads, pairs * shape.StateFloatsPerHead() * 2), pairs));
  const int64_t tasks = std::min<int64_t>(pairs, int64_t{8} * threads);
  ParallelFor(threads, tasks, [&](int64_t task, int) {
    const int64_t end = pairs * (task + 1) / tasks;
    for (int64_t i = pairs * task / tasks; i < end; ++i) {
      const int64_t b = i / shape.heads;
      const int64_t h = i % shape.heads;
      float* s = states[b] + h * shape.StateFloatsPerHead();
      float* z = s + static_cast<int64_t>(shape.feature_dim) * shape.head_dim;
      LinearAttentionStep(phi_q + i * shape.feature_dim, phi_k + i * shape.feature_dim,
                          v + b * hd + h * shape.head_dim, shape.feature_dim, shape.head_dim,
                          shape.eps, s, z, out + b * hd + h * shape.head_dim);
    }
  });
}

int64_t LinearAttentionChunkScratchFloats(int chunk, int num_threads) {
  // Per thread: A (chunk × chunk) and the denominators (chunk).
  return static_cast<int64_t>(std::max(1, num_threads)) * chunk * (chunk + 1);
}

namespace {

void ChunkOneHead(const AttentionShape& shape, int chunk, int h, const float* phi_q,
                  const float* phi_k, const float* v, float* state, float* out, float* a) {
  const int f_dim = shape.feature_dim;
  const int dh = shape.head_dim;
  const int ld_phi = shape.heads * f_dim;  // row stride of one head's φ rows
  const int ld_v = shape.heads * dh;
  const float* q = phi_q + static_cast<int64_t>(h) * f_dim;
  const float* k = phi_k + static_cast<int64_t>(h) * f_dim;
  const float* vh = v + static_cast<int64_t>(h) * dh;
  float* o = out + static_cast<int64_t>(h) * dh;
  float* s = state + h * shape.StateFloatsPerHead();
  float* z = s + static_cast<int64_t>(f_dim) * dh;
  float* den = a + static_cast<int64_t>(chunk) * chunk;

  // A = φ(Q) φ(K)ᵀ, causal: entries above the diagonal are dropped.
  Gemm(Transpose::kNo, Transpose::kYes, chunk, chunk, f_dim, 1.0f, q, ld_phi, k, ld_phi, 0.0f, a,
       chunk);
  for (int i = 0; i < chunk; ++i) {
    float* ai = a + static_cast<int64_t>(i) * chunk;
    std::fill(ai + i + 1, ai + chunk, 0.0f);
    float d = 0.0f;
    for (int j = 0; j <= i; ++j) d += ai[j];
    const float* qi = q + static_cast<int64_t>(i) * ld_phi;
    for (int f = 0; f < f_dim; ++f) d += qi[f] * z[f];
    den[i] = d;
  }
  // o = φ(Q) S + A V, then divided row by row.
  Gemm(Transpose::kNo, Transpose::kNo, chunk, dh, f_dim, 1.0f, q, ld_phi, s, dh, 0.0f, o, ld_v);
  Gemm(Transpose::kNo, Transpose::kNo, chunk, dh, chunk, 1.0f, a, chunk, vh, ld_v, 1.0f, o, ld_v);
  for (int i = 0; i < chunk; ++i) {
    const float inv = 1.0f / (den[i] + shape.eps);
    float* oi = o + static_cast<int64_t>(i) * ld_v;
    for (int d = 0; d < dh; ++d) oi[d] *= inv;
  }
  // Carry: S += φ(K)ᵀ V, z += Σ φ(K).
  Gemm(Transpose::kYes, Transpose::kNo, f_dim, dh, chunk, 1.0f, k, ld_phi, vh, ld_v, 1.0f, s, dh);
  for (int i = 0; i < chunk; ++i) {
    const float* ki = k + static_cast<int64_t>(i) * ld_phi;
    for (int f = 0; f < f_dim; ++f) z[f] += ki[f];
  }
}

}  // namespace

void LinearAttentionPrefill(const AttentionShape& shape, const PrefillRows* pieces, int count,
                            int chunk, const float* phi_q, const float* phi_k, const float* v,
                            float* out, float* scratch, int num_threads) {
  int64_t rows = 0;
  for (int p = 0; p < count; ++p) rows += pieces[p].rows;
  const int64_t work = static_cast<int64_t>(shape.heads) * rows *
                       (chunk + shape.feature_dim) * shape.head_dim * 2;
  const int64_t pairs = static_cast<int64_t>(count) * shape.heads;
  const int threads = static_cast<int>(std::min<int64_t>(ThreadsForWork(num_threads, work), pairs));
  const int64_t per_thread = static_cast<int64_t>(chunk) * (chunk + 1);
  const int64_t hf = static_cast<int64_t>(shape.heads) * shape.feature_dim;
  const int64_t hd = static_cast<int64_t>(shape.heads) * shape.head_dim;
  ParallelFor(threads, pairs, [&](int64_t pair, int participant) {
    const PrefillRows& piece = pieces[pair / shape.heads];
    const int h = static_cast<int>(pair % shape.heads);
    float* s = piece.state + h * shape.StateFloatsPerHead();
    float* z = s + static_cast<int64_t>(shape.feature_dim) * shape.head_dim;
    for (int r = 0; r < piece.rows;) {
      const int n = std::min(piece.rows - r, chunk);
      const int64_t row = piece.first_row + r;
      if (n == 1) {
        LinearAttentionStep(phi_q + row * hf + h * shape.feature_dim,
                            phi_k + row * hf + h * shape.feature_dim,
                            v + row * hd + h * shape.head_dim, shape.feature_dim, shape.head_dim,
                            shape.eps, s, z, out + row * hd + h * shape.head_dim);
      } else {
        ChunkOneHead(shape, n, h, phi_q + row * hf, phi_k + row * hf, v + row * hd, piece.state,
                     out + row * hd, scratch + participant * per_thread);
      }
      r += n;
    }
  });
}

void LinearAttentionChunk(const AttentionShape& shape, int chunk, const float* phi_q,
                          const float* phi_k, const float* v, float* state, float* out,
                          float* scratch, int num_threads) {
  // Per head: four products of about chunk · (chunk + F) · Dh multiply-adds in all.
  const int64_t work = static_cast<int64_t>(shape.heads) * chunk *
                       (chunk + shape.feature_dim) * shape.head_dim * 2;
  const int threads = std::min(ThreadsForWork(num_threads, work), shape.heads);
  const int64_t per_thread = static_cast<int64_t>(chunk) * (chunk + 1);
  ParallelFor(threads, shape.heads, [&](int64_t h, int participant) {
    ChunkOneHead(shape, chunk, static_cast<int>(h), phi_q, phi_k, v, state, out,
                 scratch + participant * per_thread);
  });
}

}  // namespace linserve::cpu
