// A prefill pass's sessions, for the kernels that run once per layer over all of them (varlen,
// as vLLM runs a step's prompts): a pass's rows are pieces, each consecutive rows fed to one
// slot's state, and a piece's rows are cut into chunks of `chunk` rows counted from its first row.
// The backend cuts a session between passes at a multiple of the chunk from its first token, so
// these are the chunks the session gets fed alone: the kernels give bitwise what one launch per
// session gives.
//
// The chunked attention carries a running state from chunk to chunk within a piece. A chunk's
// carry_in is where the state before it is (-1: the slot's state itself, for a piece's first
// chunk), its carry_out where the state after it goes (-1 for a piece's last chunk, which
// updates the slot). Carries are numbered over the pass: a piece of k chunks has k − 1 of them,
// so a pass of R rows has at most R / chunk (PrefillCarries), whatever its pieces.
#ifndef LINSERVE_KERNELS_CUDA_PREFILL_PIECES_H_
#define LINSERVE_KERNELS_CUDA_PREFILL_PIECES_H_

#include <cstdint>
#include <vector>

namespace linserve::cuda {

struct PrefillPiece {
  int32_t slot = 0;
  int32_t first_row = 0;  // within the pass
  int32_t rows = 0;       // >= 1
  int32_t first_chunk = 0;
  int32_t chunks = 0;  // ceil(rows / chunk)
};

struct PrefillChunk {
  int32_t piece = 0;
  int32_t first_row = 0;  // within the pass
  int32_t rows = 0;       // chunk, or fewer for a piece's last
  int32_t carry_in = -1;
  int32_t carry_out = -1;
};

// The tables as the kernels read them (device memory), with their sizes.
struct PrefillTables {
  const PrefillPiece* pieces = nullptr;  // [piece_count]
  const PrefillChunk* chunks = nullptr;  // [chunk_count], piece by piece, in row order
  int piece_count = 0;
  int chunk_count = 0;
  int carries = 0;  // carry slots the chunks use
  int rows = 0;     // of the pass: the pieces cover [0, rows)
  int chunk = 0;
};

// Carry slots a pass of `rows` rows needs at most, whatever its pieces: rows / chunk.
inline int64_t PrefillCarries(int64_t rows, int chunk) { return rows / chunk; }

// The host side of a pass's tables: Add each piece in row order (first_row = the rows so far),
// then upload pieces() and chunks().
class PrefillTableBuilder {
 public:
  explicit PrefillTableBuilder(int chunk) : chunk_(chunk) {}
  void Clear();
  void Add(int32_t slot, int32_t rows);
  const std::vector<PrefillPiece>& pieces() const { return pieces_; }
  const std::vector<PrefillChunk>& chunks() const { return chunks_; }
  int rows() const { return rows_; }
  int carries() const { return carries_; }
  // The tables at these device copies of pieces() and chunks().
  PrefillTables On(const PrefillPiece* pieces, const PrefillChunk* chunks) const;

 private:
  int chunk_;
  int rows_ = 0;
  int carries_ = 0;
  std::vector<PrefillPiece> pieces_;
  std::vector<PrefillChunk> chunks_;
};

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_PREFILL_PIECES_H_
