// ByteWriter and ByteReader: the one byte codec of linserve's on-disk formats (session snapshots,
// session records, prefix states; docs/architecture.md §3.3).
//
// A sealed format is its magic, its fields, then the SHA-256 of everything before: the seal
// detects accidents (a torn write, a flipped bit), not forgery, so a reader still range-checks
// every field it uses. Fields are little-endian whatever the host's byte order: integers as
// two's complement, f32 as IEEE-754 binary32. A string or an array has no length of its own in
// the codec; each format writes its count where its layout says (PutString32 and ReadString32 are
// the common case: a u32 length, then the bytes).
//
// ByteReader never reads out of bounds and never allocates more than the input could hold. Its
// errors are sticky: after the first one (INVALID_ARGUMENT, "FORMAT: truncated FIELD", ...) every
// read returns zero or empty, so a format reads a group of fields and then checks ok() once,
// before it uses any of them.
#ifndef LINSERVE_SERVER_STORAGE_BYTE_CODEC_H_
#define LINSERVE_SERVER_STORAGE_BYTE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace linserve {

class ByteWriter {
 public:
  // Starts the bytes with `magic`; `capacity` bytes are reserved up front (0: none), for
  // formats that know their size.
  explicit ByteWriter(absl::string_view magic, size_t capacity = 0);

  void PutU8(uint8_t value);
  void PutU32(uint32_t value);
  void PutU64(uint64_t value);
  void PutI32(int32_t value);
  void PutI64(int64_t value);
  // The bytes as they are (no length).
  void PutBytes(absl::string_view bytes);
  // A u32 length (`s` must be shorter than 4 GiB), then the bytes.
  void PutString32(absl::string_view s);
  // The values, without their count.
  void PutI32s(absl::Span<const int32_t> values);
  void PutF32s(absl::Span<const float> values);

  // Appends the seal (the SHA-256 of everything written) and hands the bytes over.
  std::string Seal() &&;

 private:
  std::string out_;
};

class ByteReader {
 public:
  // Reads `bytes`, which must outlive the reader and every view it returns. `format` begins
  // every error message ("session snapshot").
  ByteReader(absl::string_view bytes, absl::string_view format);

  // Consumes `magic`, the first bytes of the format: "not a linserve FORMAT (bad magic)" unless
  // they are.
  void ExpectMagic(absl::string_view magic);
  // Checks the seal: the input's last kSha256Bytes must be the SHA-256 of all the bytes before
  // them (from the first, whatever has been read), which then end what can be read. "truncated"
  // when too little is left for a seal, "SHA-256 checksum mismatch" when it does not match.
  void Unseal();

  // Each read fails with "truncated FIELD" when too few bytes are left.
  uint8_t ReadU8(absl::string_view field);
  uint32_t ReadU32(absl::string_view field);
  uint64_t ReadU64(absl::string_view field);
  int32_t ReadI32(absl::string_view field);
  int64_t ReadI64(absl::string_view field);
  // The next `size` bytes, a view into the input.
  absl::string_view ReadBytes(absl::string_view field, uint64_t size);
  // A u32 length, then that many bytes (a view into the input); "FIELD: N bytes exceed the limit
  // of MAX" when the length is above `max_bytes`.
  absl::string_view ReadString32(absl::string_view field, uint32_t max_bytes);
  // `count` values into `values`, resized to `count` only once the input is known to hold them
  // (left as it was on an error).
  void ReadI32s(absl::string_view field, uint64_t count, std::vector<int32_t>& values);
  void ReadF32s(absl::string_view field, uint64_t count, std::vector<float>& values);
  // Everything not read yet (before the seal, once unsealed), for a format nested in this one.
  absl::string_view ReadRest();

  size_t remaining() const { return end_ - pos_; }
  bool ok() const { return status_.ok(); }
  // The first error, else OK.
  const absl::Status& status() const { return status_; }

 private:
  // Whether `size` more bytes can be read; else records "truncated FIELD".
  bool Has(uint64_t size, absl::string_view field);
  // Records "FORMAT: `detail`" unless an error came first.
  void Fail(absl::string_view detail);

  absl::string_view bytes_;
  std::string format_;
  size_t pos_ = 0;
  size_t end_ = 0;
  absl::Status status_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_STORAGE_BYTE_CODEC_H_
