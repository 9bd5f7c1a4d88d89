#include "server/storage/byte_codec.h"

#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4,
              "f32 fields are IEEE-754 binary32");

// Shifts, not the host's order: the result is little-endian on every host (compilers turn
// these loops into one store or load where the host is little-endian itself).
template <typename U>
void AppendLittleEndian(std::string& out, U value) {
  static_assert(std::is_unsigned_v<U>);
  char bytes[sizeof(U)];
  for (size_t i = 0; i < sizeof(U); ++i) bytes[i] = static_cast<char>(value >> (8 * i));
  out.append(bytes, sizeof(U));
}

template <typename U>
U LoadLittleEndian(const char* p) {
  static_assert(std::is_unsigned_v<U>);
  U value = 0;
  for (size_t i = 0; i < sizeof(U); ++i) {
    value |= static_cast<U>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return value;
}

// 4-byte values (i32, f32) in bulk: states are megabytes, so a little-endian host copies them
// whole; any other host goes value by value.
template <typename T>
void AppendArray(std::string& out, absl::Span<const T> values) {
  static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  } else {
    out.reserve(out.size() + values.size() * sizeof(T));
    for (const T value : values) AppendLittleEndian(out, std::bit_cast<uint32_t>(value));
  }
}

template <typename T>
void LoadArray(const char* p, std::vector<T>& values) {
  static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(values.data(), p, values.size() * sizeof(T));
  } else {
    for (T& value : values) {
      value = std::bit_cast<T>(LoadLittleEndian<uint32_t>(p));
      p += sizeof(T);
    }
  }
}

}  // namespace

ByteWriter::ByteWriter(absl::string_view magic, size_t capacity) {
  out_.reserve(capacity);
  out_.append(magic.data(), magic.size());
}

void ByteWriter::PutU8(uint8_t value) { out_.push_back(static_cast<char>(value)); }
void ByteWriter::PutU32(uint32_t value) { AppendLittleEndian(out_, value); }
void ByteWriter::PutU64(uint64_t value) { AppendLittleEndian(out_, value); }
void ByteWriter::PutI32(int32_t value) { AppendLittleEndian(out_, static_cast<uint32_t>(value)); }
void ByteWriter::PutI64(int64_t value) { AppendLittleEndian(out_, static_cast<uint64_t>(value)); }
void ByteWriter::PutBytes(absl::string_view bytes) { out_.append(bytes.data(), bytes.size()); }

void ByteWriter::PutString32(absl::string_view s) {
  PutU32(static_cast<uint32_t>(s.size()));
  PutBytes(s);
}

void ByteWriter::PutI32s(absl::Span<const int32_t> values) { AppendArray(out_, values); }
void ByteWriter::PutF32s(absl::Span<const float> values) { AppendArray(out_, values); }

std::string ByteWriter::Seal() && {
  out_.append(Sha256(out_));
  return std::move(out_);
}

ByteReader::ByteReader(absl::string_view bytes, absl::string_view format)
    : bytes_(bytes), format_(format), end_(bytes.size()) {}

void ByteReader::Fail(absl::string_view detail) {
  if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(format_, ": ", detail));
}

bool ByteReader::Has(uint64_t size, absl::string_view field) {
  if (!ok()) return false;
  if (size <= remaining()) return true;
  Fail(absl::StrCat("truncated ", field));
  return false;
}

void ByteReader::ExpectMagic(absl::string_view magic) {
  if (!ok()) return;
  if (bytes_.substr(pos_, magic.size()) != magic) {
    Fail(absl::StrCat("not a linserve ", format_, " (bad magic)"));
    return;
  }
  pos_ += magic.size();
}

void ByteReader::Unseal() {
  if (!ok()) return;
  if (remaining() < kSha256Bytes) {
    Fail("truncated");
    return;
  }
  const absl::string_view sealed = bytes_.substr(0, end_ - kSha256Bytes);
  if (Sha256(sealed) != bytes_.substr(sealed.size(), kSha256Bytes)) {
    Fail("SHA-256 checksum mismatch (the bytes were corrupted or truncated)");
    return;
  }
  end_ = sealed.size();
}

uint8_t ByteReader::ReadU8(absl::string_view field) {
  if (!Has(1, field)) return 0;
  return static_cast<uint8_t>(bytes_[pos_++]);
}

uint32_t ByteReader::ReadU32(absl::string_view field) {
  if (!Has(sizeof(uint32_t), field)) return 0;
  const uint32_t value = LoadLittleEndian<uint32_t>(bytes_.data() + pos_);
  pos_ += sizeof(value);
  return value;
}

uint64_t ByteReader::ReadU64(absl::string_view field) {
  if (!Has(sizeof(uint64_t), field)) return 0;
  const uint64_t value = LoadLittleEndian<uint64_t>(bytes_.data() + pos_);
  pos_ += sizeof(value);
  return value;
}

int32_t ByteReader::ReadI32(absl::string_view field) {
  return static_cast<int32_t>(ReadU32(field));
}

int64_t ByteReader::ReadI64(absl::string_view field) {
  return static_cast<int64_t>(ReadU64(field));
}

absl::string_view ByteReader::ReadBytes(absl::string_view field, uint64_t size) {
  if (!Has(size, field)) return {};
  const absl::string_view bytes = bytes_.substr(pos_, size);
  pos_ += size;
  return bytes;
}

absl::string_view ByteReader::ReadString32(absl::string_view field, uint32_t max_bytes) {
  const uint32_t size = ReadU32(field);
  if (!ok()) return {};
  if (size > max_bytes) {
    Fail(absl::StrCat(field, ": ", size, " bytes exceed the limit of ", max_bytes));
    return {};
  }
  return ReadBytes(field, size);
}

void ByteReader::ReadI32s(absl::string_view field, uint64_t count, std::vector<int32_t>& values) {
  // count * 4 could overflow; remaining() / 4 cannot.
  if (ok() && count > remaining() / sizeof(int32_t)) Fail(absl::StrCat("truncated ", field));
  if (!ok()) return;
  values.resize(count);
  LoadArray(bytes_.data() + pos_, values);
  pos_ += count * sizeof(int32_t);
}

void ByteReader::ReadF32s(absl::string_view field, uint64_t count, std::vector<float>& values) {
  if (ok() && count > remaining() / sizeof(float)) Fail(absl::StrCat("truncated ", field));
  if (!ok()) return;
  values.resize(count);
  LoadArray(bytes_.data() + pos_, values);
  pos_ += count * sizeof(float);
}

absl::string_view ByteReader::ReadRest() {
  if (!ok()) return {};
  const absl::string_view rest = bytes_.substr(pos_, end_ - pos_);
  pos_ = end_;
  return rest;
}

}  // namespace linserve
