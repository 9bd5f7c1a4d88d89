#include "kernels/cpu/packed_matrix.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace linserve::cpu {
namespace {

constexpr int kWidth = PackedMatrix::kPanelWidth;
constexpr int kBlock = PackedMatrix::kInt8Block;
constexpr int64_t kAlign = FloatBuffer::kAlignment;
// One int8 block of a panel: 16 scales, then kBlock · 16 int8.
constexpr int64_t kInt8BlockBytes = kWidth * 4 + kBlock * kWidth;

// Offset in an int8 block's weights of output c's weight at k (k - k0 within the block).
int64_t Int8Index(int64_t k_in_block, int64_t c) {
  return k_in_block / 4 * (kWidth * 4) + c * 4 + k_in_block % 4;
}

uint16_t ToBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if (std::isnan(v)) return static_cast<uint16_t>((u >> 16) | 0x40);  // stays a (quiet) NaN
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

uint16_t ToFp16(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
float FromFp16(uint16_t h) { return _cvtsh_ss(h); }

// Bytes of one panel before padding.
int64_t RawPanelBytes(WeightFormat format, int64_t in) {
  switch (format) {
    case WeightFormat::kFp32:
      return in * kWidth * 4;
    case WeightFormat::kBf16:
    case WeightFormat::kFp16:
      return in * kWidth * 2;
    case WeightFormat::kInt8:
      return (in + kBlock - 1) / kBlock * kInt8BlockBytes;
  }
  return 0;
}

// W[row][k], or 0 past out_features.
float At(const float* w, int64_t out, int64_t in, int64_t row, int64_t k) {
  return row < out ? w[row * in + k] : 0.0f;
}

}  // namespace

std::string_view WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kFp32:
      return "fp32";
    case WeightFormat::kBf16:
      return "bf16";
    case WeightFormat::kFp16:
      return "fp16";
    case WeightFormat::kInt8:
      return "int8";
  }
  return "?";
}

PackedMatrix PackedMatrix::Pack(const float* w, int64_t out_features, int64_t in_features,
                                WeightFormat format) {
  if (format == WeightFormat::kInt8) {
    std::vector<int8_t> q(static_cast<size_t>(out_features * in_features));
    std::vector<float> scales(static_cast<size_t>(out_features * Int8Blocks(in_features)));
    QuantizeInt8(w, out_features, in_features, q.data(), scales.data());
    return FromInt8(q.data(), scales.data(), out_features, in_features);
  }
  PackedMatrix m = Allocate(format, out_features, in_features);
  const int64_t in = in_features;
  for (int64_t p = 0; p < m.panels(); ++p) {
    std::byte* dst = m.bytes_data() + p * m.panel_bytes_;
    for (int64_t c = 0; c < kWidth; ++c) {
      const int64_t row = p * kWidth + c;
      if (format == WeightFormat::kFp32) {
        float* f = reinterpret_cast<float*>(dst);
        for (int64_t k = 0; k < in; ++k) f[k * kWidth + c] = At(w, out_features, in, row, k);
      } else {
        uint16_t* h = reinterpret_cast<uint16_t*>(dst);
        for (int64_t k = 0; k < in; ++k) {
          const float v = At(w, out_features, in, row, k);
          h[k * kWidth + c] = format == WeightFormat::kBf16 ? ToBf16(v) : ToFp16(v);
        }
      }
    }
  }
  return m;
}

void PackedMatrix::QuantizeInt8(const float* w, int64_t out_features, int64_t in_features,
                                int8_t* q, float* scales) {
  const int64_t in = in_features;
  const int64_t blocks = Int8Blocks(in);
  for (int64_t row = 0; row < out_features; ++row) {
    const float* wr = w + row * in;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * kBlock;
      const int64_t k1 = std::min<int64_t>(k0 + kBlock, in);
      float max_abs = 0.0f;
      for (int64_t k = k0; k < k1; ++k) max_abs = std::max(max_abs, std::abs(wr[k]));
      const float scale = max_abs / 127.0f;
      scales[row * blocks + b] = scale;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = scale == 0.0f ? 0.0f : wr[k] / scale;
        // A NaN (a NaN or infinite weight) stores 0 rather than an undefined conversion.
        q[row * in + k] = static_cast<int8_t>(
            std::isnan(v) ? 0.0f : std::clamp(std::nearbyint(v), -127.0f, 127.0f));
      }
    }
  }
}

PackedMatrix PackedMatrix::FromInt8(const int8_t* q, const float* scales, int64_t out_features,
                                    int64_t in_features) {
  PackedMatrix m = Allocate(WeightFormat::kInt8, out_features, in_features);
  const int64_t in = in_features;
  const int64_t blocks = Int8Blocks(in);
  for (int64_t p = 0; p < m.panels(); ++p) {
    std::byte* dst = m.bytes_data() + p * m.panel_bytes_;
    for (int64_t c = 0; c < kWidth && p * kWidth + c < out_features; ++c) {
      const int64_t row = p * kWidth + c;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t k0 = b * kBlock;
        const int64_t n = std::min<int64_t>(kBlock, in - k0);
        std::byte* block = dst + b * kInt8BlockBytes;
        std::memcpy(block + c * 4, &scales[row * blocks + b], sizeof(float));
        int8_t* qb = reinterpret_cast<int8_t*>(block + kWidth * 4);
        for (int64_t k = 0; k < n; ++k) qb[Int8Index(k, c)] = q[row * in + k0 + k];
      }
    }
  }
  return m;
}

PackedMatrix PackedMatrix::Allocate(WeightFormat format, int64_t out_features,
                                    int64_t in_features) {
  PackedMatrix m;
  m.format_ = format;
  m.out_features_ = out_features;
  m.in_features_ = in_features;
  m.panel_bytes_ = (RawPanelBytes(format, in_features) + kAlign - 1) / kAlign * kAlign;
  m.data_ = FloatBuffer(m.panels() * m.panel_bytes_ / 4);
  std::memset(m.data_.data(), 0, static_cast<size_t>(m.bytes()));
  return m;
}

void PackedMatrix::Dequantize(float* w) const {
  const int64_t in = in_features_;
  for (int64_t row = 0; row < out_features_; ++row) {
    const std::byte* src = panel(row / kWidth);
    const int64_t c = row % kWidth;
    for (int64_t k = 0; k < in; ++k) {
      float v = 0.0f;
      switch (format_) {
        case WeightFormat::kFp32:
          v = reinterpret_cast<const float*>(src)[k * kWidth + c];
          break;
        case WeightFormat::kBf16:
          v = FromBf16(reinterpret_cast<const uint16_t*>(src)[k * kWidth + c]);
          break;
        case WeightFormat::kFp16:
          v = FromFp16(reinterpret_cast<const uint16_t*>(src)[k * kWidth + c]);
          break;
        case WeightFormat::kInt8: {
          const int64_t k0 = k / kBlock * kBlock;
          const std::byte* block = src + k0 / kBlock * kInt8BlockBytes;
          float scale;
          std::memcpy(&scale, block + c * 4, sizeof(scale));
          const int8_t* q = reinterpret_cast<const int8_t*>(block + kWidth * 4);
          v = static_cast<float>(q[Int8Index(k - k0, c)]) * scale;
          break;
        }
      }
      w[row * in + k] = v;
    }
  }
}

}  // namespace linserve::cpu
