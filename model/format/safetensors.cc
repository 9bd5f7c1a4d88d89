#include "model/format/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/format/file_io.h"
#include "model/format/json_parse.h"
#include "nlohmann/json.hpp"

namespace linserve {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies it as is");

namespace {

using Json = nlohmann::json;

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  int64_t size;
};

constexpr std::array<DtypeInfo, 10> kDtypes = {{
    {Dtype::kF64, "F64", 8},
    {Dtype::kF32, "F32", 4},
    {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},
    {Dtype::kI64, "I64", 8},
    {Dtype::kI32, "I32", 4},
    {Dtype::kI16, "I16", 2},
    {Dtype::kI8, "I8", 1},
    {Dtype::kU8, "U8", 1},
    {Dtype::kBool, "BOOL", 1},
}};

const DtypeInfo& Info(Dtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  return kDtypes[0];
}

std::string KnownDtypes() {
  std::vector<std::string> names;
  for (const DtypeInfo& info : kDtypes) names.push_back(info.name);
  return absl::StrJoin(names, ", ");
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

template <typename T>
T LoadLittleEndian(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// A JSON integer as uint64, or nullopt when it is not a non-negative integer.
std::optional<uint64_t> AsUnsigned(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

// Builds the error messages of one source.
class Errors {
 public:
  explicit Errors(const std::string& source) : source_(source) {}
  absl::Status File(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", message));
  }
  absl::Status Tensor(absl::string_view name, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": tensor \"", name, "\": ", message));
  }

 private:
  const std::string& source_;
};

}  // namespace

std::string_view DtypeName(Dtype dtype) { return Info(dtype).name; }

std::optional<Dtype> DtypeFromName(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

int64_t DtypeSize(Dtype dtype) { return Info(dtype).size; }

bool IsFloatDtype(Dtype dtype) {
  return dtype == Dtype::kF64 || dtype == Dtype::kF32 || dtype == Dtype::kF16 ||
         dtype == Dtype::kBF16;
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24, exactly representable in fp32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf or NaN
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

float BFloat16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

uint16_t FloatToHalf(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) {  // NaN: quiet, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  }
  if (u >= 0x477ff000u) {  // >= 65520 rounds to infinity (65504 is the largest finite half)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (u < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), mantissa = round(x · 2^24)
    const float scaled = std::bit_cast<float>(u) * 16777216.0f;  // exact: a power of two
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest-even; a
  // carry out of the mantissa correctly bumps the exponent.
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // -(112 << 23) + 0xfff
  return static_cast<uint16_t>(sign | (u >> 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: quiet, sign kept
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  const uint32_t odd = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + odd) >> 16);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  return Parse(*std::move(bytes), path);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::string bytes,
                                                                        std::string source) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(std::move(bytes), std::move(source)));
  const std::string& data = file->bytes_;
  const Errors errors(file->source_);

  if (data.size() < 8) {
    return errors.File(absl::StrCat("truncated: the file is ", data.size(),
                                    " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t header_length =
      LoadLittleEndian<uint64_t>(reinterpret_cast<const uint8_t*>(data.data()));
  if (header_length > kMaxSafetensorsHeaderBytes) {
    return errors.File(absl::StrCat("header length ", header_length, " bytes exceeds the limit of ",
                                    kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (header_length > data.size() - 8) {
    return errors.File(absl::StrCat("truncated: the header length is ", header_length,
                                    " bytes but only ", data.size() - 8,
                                    " bytes follow the 8-byte prefix"));
  }
  file->data_start_ = 8 + header_length;
  const uint64_t data_size = data.size() - file->data_start_;

  absl::StatusOr<Json> header = ParseStrictJsonObject(
      std::string_view(data).substr(8, header_length), file->source_ + " (header)");
  if (!header.ok()) return header.status();

  for (const auto& [name, entry] : header->items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return errors.File(absl::StrCat("\"__metadata__\" must be an object of strings, got ",
                                        JsonTypeName(entry)));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return errors.File(absl::StrCat("\"__metadata__\" entry \"", key,
                                          "\" must be a string, got ", JsonTypeName(value)));
        }
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) {
      return errors.Tensor(name, absl::StrCat("must be an object with dtype, shape and "
                                              "data_offsets, got ",
                                              JsonTypeName(entry)));
    }
    for (const auto& [key, value] : entry.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        return errors.Tensor(name, absl::StrCat("unknown field \"", key,
                                                "\" (expected dtype, shape, data_offsets)"));
      }
    }
    SafetensorsTensor tensor;
    tensor.name = name;

    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return errors.Tensor(name, "\"dtype\" must be present and a string");
    }
    const std::optional<Dtype> dtype = DtypeFromName(dtype_it->get<std::string>());
    if (!dtype.has_value()) {
      return errors.Tensor(name, absl::StrCat("unknown dtype ", DescribeJson(*dtype_it),
                                              " (known: ", KnownDtypes(), ")"));
    }
    tensor.dtype = *dtype;

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return errors.Tensor(name, "\"shape\" must be present and an array of integers");
    }
    uint64_t elements = 1;
    bool overflow = false;
    for (const Json& dim : *shape_it) {
      const std::optional<uint64_t> d = AsUnsigned(dim);
      if (!d.has_value() || *d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return errors.Tensor(
            name, absl::StrCat("shape dimension ", tensor.shape.size(), " is ", DescribeJson(dim),
                               "; every dimension must be an integer in [0, ",
                               std::numeric_limits<int64_t>::max(), "]"));
      }
      tensor.shape.push_back(static_cast<int64_t>(*d));
      overflow = overflow || __builtin_mul_overflow(elements, *d, &elements);
    }
    uint64_t byte_size = 0;
    overflow = overflow || __builtin_mul_overflow(elements, Info(tensor.dtype).size, &byte_size) ||
               byte_size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (overflow) {
      return errors.Tensor(
          name, absl::StrCat("shape ", ShapeText(tensor.shape), " of ",
                             DtypeName(tensor.dtype).data(), " overflows 63-bit byte arithmetic"));
    }
    tensor.num_elements = static_cast<int64_t>(elements);

    auto offsets_it = entry.find("data_offsets");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !AsUnsigned((*offsets_it)[0]).has_value() || !AsUnsigned((*offsets_it)[1]).has_value()) {
      return errors.Tensor(name,
                           "\"data_offsets\" must be present and [begin, end] with "
                           "non-negative integers");
    }
    tensor.begin = *AsUnsigned((*offsets_it)[0]);
    tensor.end = *AsUnsigned((*offsets_it)[1]);
    const std::string offsets_text =
        absl::StrCat("data_offsets [", tensor.begin, ", ", tensor.end, "]");
    if (tensor.begin > tensor.end) {
      return errors.Tensor(name, absl::StrCat(offsets_text, " are reversed (begin > end)"));
    }
    if (tensor.end > data_size) {
      return errors.Tensor(
          name, absl::StrCat(offsets_text, " run past the end of the data buffer (", data_size,
                             " bytes)"));
    }
    if (tensor.end - tensor.begin != byte_size) {
      return errors.Tensor(name,
                           absl::StrCat("dtype ", DtypeName(tensor.dtype).data(), " and shape ",
                                        ShapeText(tensor.shape), " need ", byte_size, " bytes but ",
                                        offsets_text, " span ", tensor.end - tensor.begin));
    }
    file->tensors_.push_back(std::move(tensor));
  }

  std::sort(file->tensors_.begin(), file->tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
            });
  // The tensors must tile [0, data_size): each starts where the previous one ended.
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : file->tensors_) {
    if (tensor.begin < covered) {
      return errors.Tensor(
          tensor.name,
          absl::StrCat("data_offsets [", tensor.begin, ", ", tensor.end, "] overlap tensor \"",
                       previous->name, "\" at [", previous->begin, ", ", previous->end, "]"));
    }
    if (tensor.begin > covered) {
      return errors.File(absl::StrCat("bytes [", covered, ", ", tensor.begin,
                                      ") of the data buffer belong to no tensor (a gap before "
                                      "tensor \"",
                                      tensor.name, "\")"));
    }
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != data_size) {
    return errors.File(absl::StrCat("bytes [", covered, ", ", data_size,
                                    ") at the end of the data buffer belong to no tensor"));
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    file->index_.emplace(file->tensors_[i].name, i);
  }
  return file;
}

absl::StatusOr<const SafetensorsTensor*> SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(source_, ": no tensor named \"", std::string(name), "\""));
  }
  return &tensors_[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::Data(const SafetensorsTensor& tensor) const {
  return absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(bytes_.data()) + data_start_ + tensor.begin,
      tensor.end - tensor.begin);
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadFloat32(std::string_view name) const {
  absl::StatusOr<const SafetensorsTensor*> found = Find(name);
  if (!found.ok()) return found.status();
  const SafetensorsTensor& tensor = **found;
  if (!IsFloatDtype(tensor.dtype)) {
    return Errors(source_).Tensor(tensor.name,
                                  absl::StrCat("has dtype ", DtypeName(tensor.dtype).data(),
                                               "; expected a float dtype (F64, F32, F16, BF16)"));
  }
  const uint8_t* p = Data(tensor).data();
  std::vector<float> out(static_cast<size_t>(tensor.num_elements));
  switch (tensor.dtype) {
    case Dtype::kF32:
      if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(float));
      break;
    case Dtype::kF64:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<float>(LoadLittleEndian<double>(p + 8 * i));
      }
      break;
    case Dtype::kF16:
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = HalfToFloat(LoadLittleEndian<uint16_t>(p + 2 * i));
      break;
    default:  // kBF16
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = BFloat16ToFloat(LoadLittleEndian<uint16_t>(p + 2 * i));
      }
      break;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> SafetensorsFile::ReadInt64(std::string_view name) const {
  absl::StatusOr<const SafetensorsTensor*> found = Find(name);
  if (!found.ok()) return found.status();
  const SafetensorsTensor& tensor = **found;
  if (IsFloatDtype(tensor.dtype)) {
    return Errors(source_).Tensor(
        tensor.name, absl::StrCat("has dtype ", DtypeName(tensor.dtype).data(),
                                  "; expected an integer dtype (I64, I32, I16, I8, U8, BOOL)"));
  }
  const uint8_t* p = Data(tensor).data();
  std::vector<int64_t> out(static_cast<size_t>(tensor.num_elements));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (tensor.dtype) {
      case Dtype::kI64:
        out[i] = LoadLittleEndian<int64_t>(p + 8 * i);
        break;
      case Dtype::kI32:
        out[i] = LoadLittleEndian<int32_t>(p + 4 * i);
        break;
      case Dtype::kI16:
        out[i] = LoadLittleEndian<int16_t>(p + 2 * i);
        break;
      case Dtype::kI8:
        out[i] = static_cast<int8_t>(p[i]);
        break;
      case Dtype::kBool:
        out[i] = p[i] != 0 ? 1 : 0;
        break;
      default:  // kU8
        out[i] = p[i];
        break;
    }
  }
  return out;
}

namespace {

// Appends `value` as `dtype` to `out`, or returns false when it does not fit.
bool AppendInt(Dtype dtype, int64_t value, std::string& out) {
  auto append = [&out](auto v) {
    char raw[sizeof(v)];
    std::memcpy(raw, &v, sizeof(v));
    out.append(raw, sizeof(v));
  };
  auto fits = [value](int64_t lo, int64_t hi) { return value >= lo && value <= hi; };
  switch (dtype) {
    case Dtype::kI64:
      append(value);
      return true;
    case Dtype::kI32:
      if (!fits(INT32_MIN, INT32_MAX)) return false;
      append(static_cast<int32_t>(value));
      return true;
    case Dtype::kI16:
      if (!fits(INT16_MIN, INT16_MAX)) return false;
      append(static_cast<int16_t>(value));
      return true;
    case Dtype::kI8:
      if (!fits(INT8_MIN, INT8_MAX)) return false;
      append(static_cast<int8_t>(value));
      return true;
    case Dtype::kU8:
      if (!fits(0, UINT8_MAX)) return false;
      append(static_cast<uint8_t>(value));
      return true;
    default:  // kBool
      if (!fits(0, 1)) return false;
      append(static_cast<uint8_t>(value));
      return true;
  }
}

void AppendFloat(Dtype dtype, float value, std::string& out) {
  auto append = [&out](auto v) {
    char raw[sizeof(v)];
    std::memcpy(raw, &v, sizeof(v));
    out.append(raw, sizeof(v));
  };
  switch (dtype) {
    case Dtype::kF64:
      append(static_cast<double>(value));
      break;
    case Dtype::kF32:
      append(value);
      break;
    case Dtype::kF16:
      append(FloatToHalf(value));
      break;
    default:  // kBF16
      append(FloatToBFloat16(value));
      break;
  }
}

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const SafetensorsWriteTensor> tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::string data;
  for (const SafetensorsWriteTensor& t : tensors) {
    auto error = [&t](absl::string_view message) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors writer: tensor \"", t.name, "\": ", message));
    };
    if (t.name.empty() || t.name == "__metadata__") {
      return error("is not a valid tensor name");
    }
    if (!names.insert(t.name).second) return error("duplicate tensor name");
    uint64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return error(absl::StrCat("negative dimension in shape ", ShapeText(t.shape)));
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) {
        return error(absl::StrCat("shape ", ShapeText(t.shape), " overflows"));
      }
    }
    const bool is_float = IsFloatDtype(t.dtype);
    const size_t given = is_float ? t.floats.size() : t.ints.size();
    const size_t other = is_float ? t.ints.size() : t.floats.size();
    if (given != elements || other != 0) {
      return error(absl::StrCat(
          "dtype ", DtypeName(t.dtype).data(), " and shape ", ShapeText(t.shape), " need ",
          elements, " ", is_float ? "floats" : "ints", " (and no ", is_float ? "ints" : "floats",
          "), got ", t.floats.size(), " floats and ", t.ints.size(), " ints"));
    }
    const uint64_t begin = data.size();
    if (is_float) {
      for (float v : t.floats) AppendFloat(t.dtype, v, data);
    } else {
      for (size_t i = 0; i < t.ints.size(); ++i) {
        if (!AppendInt(t.dtype, t.ints[i], data)) {
          return error(absl::StrCat("element ", i, " = ", t.ints[i], " does not fit ",
                                    DtypeName(t.dtype).data()));
        }
      }
    }
    header[t.name] = {{"dtype", DtypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {begin, static_cast<uint64_t>(data.size())}}};
  }
  std::string header_text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data buffer starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header_text.size() + data.size());
  const uint64_t length = header_text.size();
  char raw[8];
  std::memcpy(raw, &length, 8);
  out.append(raw, 8);
  out += header_text;
  out += data;
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsWriteTensor> tensors,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(path, *bytes);
}

}  // namespace linserve
