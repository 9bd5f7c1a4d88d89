// PackedMatrix: a weight matrix W [out_features, in_features] (as nn.Linear stores it), repacked
// once at load into the panel layout packed_linear.h's kernels stream, in one of four formats.
#ifndef LINSERVE_KERNELS_CPU_PACKED_MATRIX_H_
#define LINSERVE_KERNELS_CPU_PACKED_MATRIX_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/cpu/aligned_buffer.h"

namespace linserve::cpu {

// How a PackedMatrix stores its weights. The kernels widen fp32/bf16/fp16 to fp32 in registers
// and compute in fp32, so a Linear over such a matrix is bitwise the fp32 Linear over its
// dequantized weights (see Dequantize); int8 is multiplied in integers against activations
// quantized to int8 (int8_linear.h).
enum class WeightFormat {
  kFp32,
  // bfloat16, rounded to nearest even (NaN stays NaN).
  kBf16,
  // IEEE half, rounded to nearest even by F16C (x86-64-v3 has it); magnitudes above 65504
  // become ±inf, as in any fp16 store.
  kFp16,
  // int8 with one fp32 scale per block of kInt8Block input features per output feature:
  // scale = max|w| / 127 over the block, q = round-to-nearest-even(w / scale) in [-127, 127]; an
  // all-zero block has scale 0 (and q = 0); a NaN or infinite weight stores q = 0. The weight is
  // q · scale, rounded to fp32.
  kInt8,
};

std::string_view WeightFormatName(WeightFormat format);

// Panel p holds output features 16p .. 16p+15 (zero past out_features), for every input
// feature k in order, so that a Linear streams each weight byte once, contiguously:
//   fp32:      16 floats per k.
//   bf16/fp16: 16 halves per k (32 bytes).
//   int8:      per block of kInt8Block k: the block's 16 scales (64 bytes), then kInt8Block / 4
//              groups of 4 consecutive k, 64 bytes each: bytes 4c .. 4c+3 of a group are
//              output c's 4 weights, in k order (the lane layout of AVX2's maddubs + madd and
//              of AVX-512 VNNI's vpdpbusd). The last block is padded with q = 0 to kInt8Block.
// Each panel starts on a 64-byte boundary. Immutable after Pack.
class PackedMatrix {
 public:
  static constexpr int kPanelWidth = 16;
  // Why 32: the quantization error of a weight is at most half its block's scale, so a smaller
  // block tracks local magnitude better; 32 is what llama.cpp's Q8_0 uses (results comparable
  // to the peer's), and the 16 scales of a block (64 bytes) add 4/32 = 0.125 bytes per weight —
  // 11% over 1 byte — while one scale per 32 k keeps the scale loads off the inner loop's
  // critical path.
  static constexpr int kInt8Block = 32;

  PackedMatrix() = default;
  // Packs `w`, [out_features, in_features] row-major; both dimensions must be positive.
  // Default format: fp32.
  static PackedMatrix Pack(const float* w, int64_t out_features, int64_t in_features,
                           WeightFormat format = WeightFormat::kFp32);
  // int8 weights quantized elsewhere (a model file stored int8): q [out_features, in_features]
  // row-major, each in [-127, 127], and scales [out_features, Int8Blocks(in_features)] row-major,
  // finite and non-negative (the caller checks). Packs them as they are, through the same layout
  // Pack's int8 path uses: Pack(w, …, kInt8) is FromInt8 of QuantizeInt8(w).
  static PackedMatrix FromInt8(const int8_t* q, const float* scales, int64_t out_features,
                               int64_t in_features);
  // The int8 rule (see WeightFormat::kInt8) applied to `w` [out_features, in_features]: writes
  // q (out_features · in_features values) and scales (out_features · Int8Blocks(in_features)).
  static void QuantizeInt8(const float* w, int64_t out_features, int64_t in_features, int8_t* q,
                           float* scales);
  // Blocks of kInt8Block inputs per output feature: ceil(in_features / kInt8Block).
  static int64_t Int8Blocks(int64_t in_features) {
    return (in_features + kInt8Block - 1) / kInt8Block;
  }

  WeightFormat format() const { return format_; }
  int64_t out_features() const { return out_features_; }
  int64_t in_features() const { return in_features_; }
  int64_t panels() const { return (out_features_ + kPanelWidth - 1) / kPanelWidth; }
  const std::byte* panel(int64_t p) const { return bytes_data() + p * panel_bytes_; }
  // Bytes of one panel, padding to 64 bytes included.
  int64_t panel_bytes() const { return panel_bytes_; }
  // Bytes of weights one Linear call streams (fp32: 4 per weight, bf16/fp16: 2, int8: 1 + 4/32;
  // plus the padding of the last panel to 16 outputs, of the last int8 block to 32 inputs and of
  // each panel to 64 bytes).
  int64_t bytes() const { return panels() * panel_bytes_; }
  // The weights the kernels compute with, as fp32 [out_features, in_features] row-major into
  // `w` (out_features · in_features floats).
  void Dequantize(float* w) const;

 private:
  // A zeroed matrix of `format`'s panel layout.
  static PackedMatrix Allocate(WeightFormat format, int64_t out_features, int64_t in_features);
  const std::byte* bytes_data() const { return reinterpret_cast<const std::byte*>(data_.data()); }
  std::byte* bytes_data() { return reinterpret_cast<std::byte*>(data_.data()); }

  WeightFormat format_ = WeightFormat::kFp32;
  int64_t out_features_ = 0;
  int64_t in_features_ = 0;
  int64_t panel_bytes_ = 0;
  FloatBuffer data_;
};

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_PACKED_MATRIX_H_
