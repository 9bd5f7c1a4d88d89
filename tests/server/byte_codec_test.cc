// The byte codec of the on-disk formats: values are little-endian byte for byte, round-trip
// exactly, and every way a reader can fail (bad magic, a broken seal, a truncated field, a string
// over its limit, a count the input cannot hold) is an INVALID_ARGUMENT naming the format and the
// field, after which the reader reads nothing more.
#include "server/storage/byte_codec.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage/sha256.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kMagic("TESTFMT\x1a", 8);

std::string Message(const ByteReader& r) { return std::string(r.status().message()); }

TEST(ByteCodecTest, ValuesAreLittleEndianByteForByte) {
  ByteWriter w("M");
  w.PutU8(0xa5);
  w.PutU32(0x01020304);
  w.PutU64(0x0102030405060708);
  w.PutI32(-2);
  w.PutI64(-3);
  w.PutString32("ab");
  const std::vector<int32_t> ints = {0x0a0b0c0d};
  w.PutI32s(ints);
  const std::vector<float> floats = {1.0f, -2.5f};  // 0x3f800000, 0xc0200000
  w.PutF32s(floats);
  const std::string bytes = std::move(w).Seal();
  const std::string body(
      "M"
      "\xa5"
      "\x04\x03\x02\x01"
      "\x08\x07\x06\x05\x04\x03\x02\x01"
      "\xfe\xff\xff\xff"
      "\xfd\xff\xff\xff\xff\xff\xff\xff"
      "\x02\x00\x00\x00"
      "ab"
      "\x0d\x0c\x0b\x0a"
      "\x00\x00\x80\x3f"
      "\x00\x00\x20\xc0",
      1 + 1 + 4 + 8 + 4 + 8 + 4 + 2 + 4 + 8);
  EXPECT_EQ(bytes, body + Sha256(body));
}

TEST(ByteCodecTest, EveryValueRoundTrips) {
  const std::vector<int32_t> ints = {std::numeric_limits<int32_t>::min(), -1, 0, 7,
                                     std::numeric_limits<int32_t>::max()};
  const std::vector<float> floats = {0.0f, -0.0f, 1e-45f, -3.25f, 3.4e38f,
                                     std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()};
  ByteWriter w(kMagic);
  w.PutU8(std::numeric_limits<uint8_t>::max());
  w.PutU32(std::numeric_limits<uint32_t>::max());
  w.PutU64(std::numeric_limits<uint64_t>::max());
  w.PutI32(std::numeric_limits<int32_t>::min());
  w.PutI64(std::numeric_limits<int64_t>::min());
  w.PutString32(std::string("with\0nul", 8));
  w.PutBytes("raw");
  w.PutI32s(ints);
  w.PutF32s(floats);
  const std::string bytes = std::move(w).Seal();

  ByteReader r(bytes, "test format");
  r.ExpectMagic(kMagic);
  r.Unseal();
  EXPECT_EQ(r.ReadU8("u8"), std::numeric_limits<uint8_t>::max());
  EXPECT_EQ(r.ReadU32("a"), std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(r.ReadU64("b"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r.ReadI32("c"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(r.ReadI64("d"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(r.ReadString32("e", 8), std::string("with\0nul", 8));
  EXPECT_EQ(r.ReadBytes("f", 3), "raw");
  std::vector<int32_t> ints_read;
  r.ReadI32s("g", ints.size(), ints_read);
  EXPECT_EQ(ints_read, ints);
  std::vector<float> floats_read;
  r.ReadF32s("h", floats.size(), floats_read);
  ASSERT_EQ(floats_read.size(), floats.size());
  for (size_t i = 0; i + 1 < floats.size(); ++i) {
    EXPECT_EQ(std::signbit(floats_read[i]), std::signbit(floats[i])) << i;
    EXPECT_EQ(floats_read[i], floats[i]) << i;
  }
  EXPECT_TRUE(std::isnan(floats_read.back()));
  EXPECT_EQ(r.remaining(), 0u);  // the seal is not readable
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST(ByteCodecTest, ReadRestEndsBeforeTheSeal) {
  ByteWriter w(kMagic);
  w.PutU32(1);
  w.PutBytes("nested");
  const std::string bytes = std::move(w).Seal();
  ByteReader r(bytes, "test format");
  r.ExpectMagic(kMagic);
  r.Unseal();
  EXPECT_EQ(r.ReadU32("version"), 1u);
  EXPECT_EQ(r.ReadRest(), "nested");
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_TRUE(r.ok());
}

TEST(ByteCodecTest, ABadMagicNamesTheFormat) {
  ByteReader r("NOTMAGIC....", "test format");
  r.ExpectMagic(kMagic);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(r), "test format: not a linserve test format (bad magic)");
  ByteReader empty("", "test format");
  empty.ExpectMagic(kMagic);
  EXPECT_THAT(Message(empty), HasSubstr("bad magic"));
}

TEST(ByteCodecTest, TheSealCoversEveryByteFromTheFirst) {
  ByteWriter w(kMagic);
  w.PutU64(42);
  const std::string bytes = std::move(w).Seal();
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupt = bytes;
    corrupt[i] ^= 0x01;
    ByteReader r(corrupt, "test format");
    r.Unseal();  // before the magic: the seal covers it too
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_THAT(Message(r), HasSubstr("checksum")) << i;
  }
  const std::string too_short = bytes.substr(0, kSha256Bytes - 1);
  ByteReader short_input(too_short, "test format");
  short_input.Unseal();
  EXPECT_EQ(Message(short_input), "test format: truncated");
  // What was read already cannot be the seal.
  ByteReader read_too_far(bytes, "test format");
  read_too_far.ReadBytes("all but 31", bytes.size() - kSha256Bytes + 1);
  read_too_far.Unseal();
  EXPECT_EQ(Message(read_too_far), "test format: truncated");
}

TEST(ByteCodecTest, ATruncatedFieldIsNamedAndTheErrorSticks) {
  const std::string bytes("\x01\x00\x00\x00\x02\x00", 6);
  ByteReader r(bytes, "test format");
  EXPECT_EQ(r.ReadU32("version"), 1u);
  EXPECT_EQ(r.ReadU32("count"), 0u);
  EXPECT_EQ(Message(r), "test format: truncated count");
  // Nothing more is read, and the first error stays.
  EXPECT_EQ(r.ReadBytes("rest", 1), "");
  EXPECT_EQ(r.ReadRest(), "");
  EXPECT_EQ(r.remaining(), 2u);
  EXPECT_EQ(Message(r), "test format: truncated count");
}

TEST(ByteCodecTest, AStringOverItsLimitOrPastTheEndIsRefused) {
  ByteWriter w("");
  w.PutString32("owner name");
  const std::string bytes = std::move(w).Seal();
  ByteReader over(bytes, "test format");
  over.ReadString32("owner", 9);
  EXPECT_EQ(Message(over), "test format: owner: 10 bytes exceed the limit of 9");
  const std::string short_string("\xff\x00\x00\x00" "abc", 7);
  ByteReader past(short_string, "test format");
  past.ReadString32("owner", 1000);
  EXPECT_EQ(Message(past), "test format: truncated owner");
}

TEST(ByteCodecTest, ACountTheInputCannotHoldAllocatesNothing) {
  const std::string eight_bytes(8, '\0');
  ByteReader r(eight_bytes, "test format");
  std::vector<float> floats = {1.0f};
  // 2^62 floats: a resize before the bounds check would throw or exhaust memory, and
  // count * 4 would overflow to 0.
  r.ReadF32s("state", uint64_t{1} << 62, floats);
  EXPECT_EQ(Message(r), "test format: truncated state");
  EXPECT_EQ(floats, std::vector<float>{1.0f});  // left as it was
  ByteReader ints_reader(absl::string_view(eight_bytes).substr(1), "test format");
  std::vector<int32_t> ints;
  ints_reader.ReadI32s("tokens", 2, ints);
  EXPECT_EQ(Message(ints_reader), "test format: truncated tokens");
  EXPECT_TRUE(ints.empty());
}

}  // namespace
}  // namespace linserve
