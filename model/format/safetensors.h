// Safetensors: reading and writing the model.safetensors format
// (https://github.com/huggingface/safetensors: 8-byte little-endian header length N, N bytes of
// JSON header, then the data buffer).
//
// The reader treats the file as hostile. It accepts a file only if: the header length is at most
// kMaxSafetensorsHeaderBytes and fits in the file; the header is one JSON object without
// duplicate keys whose entries are each {"dtype": string, "shape": [non-negative integers],
// "data_offsets": [begin, end]} (plus an optional "__metadata__" object of strings); every dtype
// is known; every tensor's byte size (dtype size × shape product, computed with overflow checks)
// equals end − begin; and the tensors tile the data buffer exactly: sorted by offset they start
// at 0, neither overlap nor leave gaps, and end at the end of the file. Errors are
// INVALID_ARGUMENT (NOT_FOUND for a missing file or tensor) and name the source, the tensor and
// the limit that was broken.
#ifndef LINSERVE_MODEL_FORMAT_SAFETENSORS_H_
#define LINSERVE_MODEL_FORMAT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace linserve {

// Largest header the reader accepts. Real headers are a few hundred bytes per tensor.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;  // 100 MiB

// The element types the reader knows, by their safetensors names.
enum class Dtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "BF16", "BOOL", ...
std::string_view DtypeName(Dtype dtype);
// nullopt for a name that is not one of the above.
std::optional<Dtype> DtypeFromName(std::string_view name);
// Bytes per element: 8, 4, 2, 2, 8, 4, 2, 1, 1, 1.
int64_t DtypeSize(Dtype dtype);
bool IsFloatDtype(Dtype dtype);  // F64, F32, F16, BF16

// One tensor of a parsed file. Offsets are relative to the start of the data buffer.
struct SafetensorsTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  int64_t num_elements = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A parsed and fully validated file, held in memory. Immutable and thread-safe after creation.
class SafetensorsFile {
 public:
  // Reads and validates the file at `path`. NOT_FOUND when it does not exist.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Validates `bytes`, a whole file's contents; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::string bytes,
                                                                std::string source);

  const std::string& source() const { return source_; }
  // The whole file, exactly as read.
  const std::string& bytes() const { return bytes_; }
  // Every tensor, in ascending data offset order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor called `name`, or NOT_FOUND naming it and the source.
  absl::StatusOr<const SafetensorsTensor*> Find(std::string_view name) const;
  // The tensor's bytes inside bytes() (little-endian, as stored).
  absl::Span<const uint8_t> Data(const SafetensorsTensor& tensor) const;

  // The named tensor's elements converted to fp32 (F64 rounds to nearest, F16/BF16 are exact).
  // INVALID_ARGUMENT naming the tensor and its dtype when it is not a float dtype.
  absl::StatusOr<std::vector<float>> ReadFloat32(std::string_view name) const;
  // The named tensor's elements widened to int64 (I64, I32, I16, I8, U8, BOOL as 0/1).
  absl::StatusOr<std::vector<int64_t>> ReadInt64(std::string_view name) const;

 private:
  SafetensorsFile(std::string bytes, std::string source)
      : bytes_(std::move(bytes)), source_(std::move(source)) {}

  std::string bytes_;
  std::string source_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor to write. The element data is borrowed, not owned: exactly one of `floats` (for the
// float dtypes, rounded to nearest-even when narrowing) and `ints` (for the integer dtypes and
// BOOL) holds product(shape) elements.
struct SafetensorsWriteTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  absl::Span<const float> floats;
  absl::Span<const int64_t> ints;
};

// The bytes of a safetensors file holding `tensors` in the given order, with an optional
// "__metadata__" map. INVALID_ARGUMENT for an empty, duplicate or "__metadata__" name, a
// negative dimension, element data of the wrong kind or count, or an integer that does not fit
// its dtype.
absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const SafetensorsWriteTensor> tensors,
    const std::map<std::string, std::string>& metadata = {});

// Serialises and writes to `path` through a temporary file renamed into place, so a reader never
// sees a half-written file.
absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsWriteTensor> tensors,
                              const std::map<std::string, std::string>& metadata = {});

// IEEE binary16 / bfloat16 bit patterns <-> fp32. Widening is exact; narrowing rounds to
// nearest-even, overflows to ±inf, and keeps NaN a NaN (quiet, sign preserved).
float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
uint16_t FloatToBFloat16(float value);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_SAFETENSORS_H_
