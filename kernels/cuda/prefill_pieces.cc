#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

void PrefillTableBuilder::Clear() {
  rows_ = 0;
  carries_ = 0;
  pieces_.clear();
  chunks_.clear();
}

void PrefillTableBuilder::Add(int32_t slot, int32_t rows) {
  PrefillPiece piece;
  piece.slot = slot;
  piece.first_row = rows_;
  piece.rows = rows;
  piece.first_chunk = static_cast<int32_t>(chunks_.size());
  piece.chunks = (rows + chunk_ - 1) / chunk_;
  const int32_t piece_index = static_cast<int32_t>(pieces_.size());
  for (int32_t c = 0; c < piece.chunks; ++c) {
    PrefillChunk chunk;
    chunk.piece = piece_index;
    chunk.first_row = rows_ + c * chunk_;
    chunk.rows = c + 1 < piece.chunks ? chunk_ : rows - c * chunk_;
    chunk.carry_in = c == 0 ? -1 : carries_ + c - 1;
    chunk.carry_out = c + 1 < piece.chunks ? carries_ + c : -1;
    chunks_.push_back(chunk);
  }
  carries_ += piece.chunks - 1;
  rows_ += rows;
  pieces_.push_back(piece);
}

PrefillTables PrefillTableBuilder::On(const PrefillPiece* pieces,
                                      const PrefillChunk* chunks) const {
  PrefillTables tables;
  tables.pieces = pieces;
  tables.chunks = chunks;
  tables.piece_count = static_cast<int>(pieces_.size());
  tables.chunk_count = static_cast<int>(chunks_.size());
  tables.carries = carries_;
  tables.rows = rows_;
  tables.chunk = chunk_;
  return tables;
}

}  // namespace linserve::cuda
