#include "model/format/safetensors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSource[] = "dir/model.safetensors";

// A file with the given header text (not validated) and data buffer.
std::string RawFile(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(out.data(), &length, 8);
  out += header;
  out += data;
  return out;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> ParseRaw(std::string_view header,
                                                          std::string_view data) {
  return SafetensorsFile::Parse(RawFile(header, data), kSource);
}

// Parses expecting INVALID_ARGUMENT; returns the message, which must name the source.
std::string ParseError(std::string bytes) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Parse(std::move(bytes), kSource);
  EXPECT_FALSE(file.ok());
  if (file.ok()) return "";
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  EXPECT_THAT(file.status().message(), HasSubstr(kSource));
  return std::string(file.status().message());
}

std::string RawError(std::string_view header, std::string_view data) {
  return ParseError(RawFile(header, data));
}

// Two F32 tensors a[2] at [0, 8) and b[1] at [8, 12), 12 bytes of data.
constexpr char kTwoTensors[] = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                               R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})";

TEST(SafetensorsTest, ParsesAHandWrittenFile) {
  std::string data(12, '\0');
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::memcpy(data.data(), values, 12);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = ParseRaw(kTwoTensors, data);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ((*file)->tensors()[0].name, "a");
  EXPECT_EQ((*file)->tensors()[1].name, "b");
  EXPECT_THAT((*file)->ReadFloat32("a").value(), ElementsAre(1.5f, -2.0f));
  EXPECT_THAT((*file)->ReadFloat32("b").value(), ElementsAre(3.25f));
  EXPECT_EQ((*file)->Data(*(*file)->Find("b").value()).size(), 4u);
}

TEST(SafetensorsTest, EveryDtypeRoundTripsThroughTheWriter) {
  const std::vector<float> floats = {0.0f, -1.5f, 65504.0f, 0.0009765625f, 3.0f, -0.25f};
  const std::vector<int64_t> wide = {0, -1, int64_t{1} << 40, std::numeric_limits<int64_t>::min()};
  const std::vector<int64_t> i32 = {INT32_MIN, INT32_MAX, 7};
  const std::vector<int64_t> i16 = {INT16_MIN, INT16_MAX};
  const std::vector<int64_t> i8 = {-128, 127, 0};
  const std::vector<int64_t> u8 = {0, 255};
  const std::vector<int64_t> flags = {1, 0, 1};
  std::vector<SafetensorsWriteTensor> tensors = {
      {"f64", Dtype::kF64, {2, 3}, floats, {}},
      {"f32", Dtype::kF32, {6}, floats, {}},
      {"f16", Dtype::kF16, {3, 2}, floats, {}},
      {"bf16", Dtype::kBF16, {1, 6}, {floats.data(), 5}, {}},
      {"i64", Dtype::kI64, {4}, {}, wide},
      {"i32", Dtype::kI32, {3}, {}, i32},
      {"i16", Dtype::kI16, {2}, {}, i16},
      {"i8", Dtype::kI8, {3}, {}, i8},
      {"u8", Dtype::kU8, {2}, {}, u8},
      {"bool", Dtype::kBool, {3}, {}, flags},
      {"empty", Dtype::kF32, {0, 5}, {}, {}},
      {"scalar", Dtype::kF32, {}, {floats.data() + 1, 1}, {}},
  };
  tensors[3].shape = {5};
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_length;
  std::memcpy(&header_length, bytes->data(), 8);
  EXPECT_EQ(header_length % 8, 0u) << "data buffer must start 8-byte aligned";

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Parse(*std::move(bytes), kSource);
  ASSERT_TRUE(file.ok()) << file.status();
  const SafetensorsFile& f = **file;
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().size(), tensors.size());
  EXPECT_EQ(f.ReadFloat32("f64").value(), floats);
  EXPECT_EQ(f.ReadFloat32("f32").value(), floats);
  EXPECT_EQ(f.ReadFloat32("f16").value(), floats);  // every value is exact in binary16
  EXPECT_THAT(f.ReadFloat32("bf16").value(),
              ElementsAre(0.0f, -1.5f, 65536.0f, 0.0009765625f, 3.0f));
  EXPECT_THAT(f.Find("f16").value()->shape, ElementsAre(3, 2));
  EXPECT_EQ(f.Find("f16").value()->dtype, Dtype::kF16);
  EXPECT_EQ(f.ReadInt64("i64").value(), wide);
  EXPECT_EQ(f.ReadInt64("i32").value(), i32);
  EXPECT_EQ(f.ReadInt64("i16").value(), i16);
  EXPECT_EQ(f.ReadInt64("i8").value(), i8);
  EXPECT_EQ(f.ReadInt64("u8").value(), u8);
  EXPECT_EQ(f.ReadInt64("bool").value(), flags);
  EXPECT_TRUE(f.ReadFloat32("empty").value().empty());
  EXPECT_EQ(f.Find("empty").value()->num_elements, 0);
  EXPECT_THAT(f.ReadFloat32("scalar").value(), ElementsAre(-1.5f));
  EXPECT_TRUE(f.Find("scalar").value()->shape.empty());
}

TEST(SafetensorsTest, HalfPrecisionRoundsOnWrite) {
  const std::vector<float> values = {1e-3f, 1.0f + 1.0f / 4096.0f, 70000.0f};
  const SafetensorsWriteTensor tensors[] = {{"h", Dtype::kF16, {3}, values, {}},
                                            {"b", Dtype::kBF16, {3}, values, {}}};
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto file = SafetensorsFile::Parse(*std::move(bytes), kSource);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<float> h = (*file)->ReadFloat32("h").value();
  EXPECT_EQ(h[0], static_cast<float>(static_cast<_Float16>(1e-3f)));
  EXPECT_EQ(h[1], 1.0f);  // a tie, rounded to even
  EXPECT_TRUE(std::isinf(h[2]));
  std::vector<float> b = (*file)->ReadFloat32("b").value();
  EXPECT_EQ(b[1], 1.0f);
  EXPECT_EQ(b[2], 70144.0f);
}

TEST(SafetensorsTest, WriteThenOpenFromDisk) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/write_then_open.safetensors");
  const std::vector<float> values = {1, 2, 3, 4};
  const SafetensorsWriteTensor tensors[] = {{"w", Dtype::kF32, {2, 2}, values, {}}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->source(), path);
  EXPECT_EQ((*file)->ReadFloat32("w").value(), values);
  std::filesystem::remove(path);
}

TEST(SafetensorsTest, OpenMissingFileIsNotFound) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/no_such.safetensors");
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr(path));
}

TEST(SafetensorsTest, OpenDirectoryFails) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(::testing::TempDir());
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, FindMissingTensorIsNotFoundNamingIt) {
  auto file = ParseRaw(kTwoTensors, std::string(12, '\0'));
  ASSERT_TRUE(file.ok());
  absl::StatusOr<const SafetensorsTensor*> t = (*file)->Find("layers.0.missing");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), AllOf(HasSubstr(kSource), HasSubstr("\"layers.0.missing\"")));
  EXPECT_EQ((*file)->ReadFloat32("zz").status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, ReadingTheWrongKindNamesTheDtype) {
  const std::vector<int64_t> ints = {1, 2};
  const std::vector<float> floats = {1, 2};
  const SafetensorsWriteTensor tensors[] = {{"ids", Dtype::kI32, {2}, {}, ints},
                                            {"w", Dtype::kBF16, {2}, floats, {}}};
  auto file = SafetensorsFile::Parse(SerializeSafetensors(tensors).value(), kSource);
  ASSERT_TRUE(file.ok());
  absl::StatusOr<std::vector<float>> f = (*file)->ReadFloat32("ids");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), AllOf(HasSubstr("\"ids\""), HasSubstr("I32")));
  absl::StatusOr<std::vector<int64_t>> i = (*file)->ReadInt64("w");
  ASSERT_FALSE(i.ok());
  EXPECT_THAT(i.status().message(), AllOf(HasSubstr("\"w\""), HasSubstr("BF16")));
}

TEST(SafetensorsTest, EmptyFileHasNoTensors) {
  auto file = ParseRaw("{}", "");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

// ---- Malformed files: one test per defect. ----

TEST(SafetensorsMalformedTest, FileShorterThanTheLengthPrefix) {
  EXPECT_THAT(ParseError(std::string("\x02\0\0", 3)),
              AllOf(HasSubstr("truncated"), HasSubstr("3 bytes"), HasSubstr("8-byte")));
}

TEST(SafetensorsMalformedTest, HeaderRunsPastTheEndOfTheFile) {
  std::string bytes = RawFile(kTwoTensors, std::string(12, '\0'));
  bytes.resize(8 + 20);
  EXPECT_THAT(ParseError(bytes), AllOf(HasSubstr("truncated"), HasSubstr("only 20 bytes")));
}

TEST(SafetensorsMalformedTest, DataBufferTruncated) {
  EXPECT_THAT(RawError(kTwoTensors, std::string(10, '\0')),
              AllOf(HasSubstr("tensor \"b\""), HasSubstr("data_offsets [8, 12]"),
                    HasSubstr("past the end of the data buffer (10 bytes)")));
}

TEST(SafetensorsMalformedTest, OversizeHeaderLength) {
  std::string bytes(16, ' ');
  const uint64_t length = kMaxSafetensorsHeaderBytes + 1;
  std::memcpy(bytes.data(), &length, 8);
  EXPECT_THAT(ParseError(bytes),
              AllOf(HasSubstr("header length 104857601"), HasSubstr("limit of 104857600")));
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  std::memcpy(bytes.data(), &huge, 8);
  EXPECT_THAT(ParseError(bytes), HasSubstr("exceeds the limit"));
}

TEST(SafetensorsMalformedTest, HeaderNotJson) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", )", ""),
              AllOf(HasSubstr("(header)"), HasSubstr("not valid JSON")));
}

TEST(SafetensorsMalformedTest, HeaderNestedTooDeeply) {
  // A million nested arrays would cost gigabytes as parsed values; the depth check refuses them
  // before parsing. Brackets inside strings do not count.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  EXPECT_THAT(RawError(absl::StrCat(R"({"a": )", deep, "}"), ""),
              AllOf(HasSubstr("nested deeper than 16 levels"), HasSubstr("at byte 21")));
  auto file = ParseRaw(R"({"__metadata__": {"note": "[[[[[[[[[[[[[[[[[[[[[[[[[["}})", "");
  EXPECT_TRUE(file.ok()) << file.status();
}

TEST(SafetensorsMalformedTest, HeaderNotAnObject) {
  EXPECT_THAT(RawError("[1, 2, 3]", ""), HasSubstr("must be a JSON object, got array"));
}

TEST(SafetensorsMalformedTest, DuplicateTensorName) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                       R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                       std::string(8, '\0')),
              HasSubstr("duplicate key \"a\""));
}

TEST(SafetensorsMalformedTest, TensorEntryNotAnObject) {
  EXPECT_THAT(RawError(R"({"a": [0, 4]})", std::string(4, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("got array")));
}

TEST(SafetensorsMalformedTest, TensorEntryWithUnknownField) {
  EXPECT_THAT(
      RawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "stride": 1}})",
               std::string(4, '\0')),
      AllOf(HasSubstr("tensor \"a\""), HasSubstr("unknown field \"stride\"")));
}

TEST(SafetensorsMalformedTest, MissingDtype) {
  EXPECT_THAT(RawError(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", std::string(4, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("\"dtype\" must be present")));
}

TEST(SafetensorsMalformedTest, UnknownDtype) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})",
                       std::string(4, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("unknown dtype string \"F8_E4M3\""),
                    HasSubstr("BF16")));
}

TEST(SafetensorsMalformedTest, ShapeNotAnArray) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})",
                       std::string(16, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("\"shape\" must be")));
}

TEST(SafetensorsMalformedTest, NegativeDimension) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [2, -2], "data_offsets": [0, 0]}})", ""),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("dimension 1 is integer -2"),
                    HasSubstr("every dimension must be an integer")));
}

TEST(SafetensorsMalformedTest, FractionalDimension) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})",
                       std::string(4, '\0')),
              HasSubstr("every dimension must be an integer"));
}

TEST(SafetensorsMalformedTest, MalformedDataOffsets) {
  for (std::string_view offsets : {"[0]", "[0, 4, 8]", "[-4, 0]", "[0, \"4\"]", "\"0-4\""}) {
    EXPECT_THAT(RawError(absl::StrCat(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": )",
                                      std::string(offsets), "}}"),
                         std::string(4, '\0')),
                AllOf(HasSubstr("tensor \"a\""), HasSubstr("\"data_offsets\" must be")))
        << offsets;
  }
}

TEST(SafetensorsMalformedTest, OffsetsOutOfRange) {
  EXPECT_THAT(
      RawError(R"({"a": {"dtype": "U8", "shape": [4], )"
               R"("data_offsets": [18446744073709551611, 18446744073709551615]}})",
               std::string(4, '\0')),
      AllOf(HasSubstr("tensor \"a\""), HasSubstr("past the end of the data buffer (4 bytes)")));
}

TEST(SafetensorsMalformedTest, OffsetsReversed) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
                       std::string(4, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("[4, 0] are reversed")));
}

TEST(SafetensorsMalformedTest, OffsetsOverlap) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                       R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                       std::string(12, '\0')),
              AllOf(HasSubstr("tensor \"b\""), HasSubstr("overlap tensor \"a\" at [0, 8]")));
}

TEST(SafetensorsMalformedTest, TwoTensorsShareBytes) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                       R"( "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                       std::string(8, '\0')),
              HasSubstr("overlap tensor"));
}

TEST(SafetensorsMalformedTest, GapBetweenTensors) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                       R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                       std::string(12, '\0')),
              AllOf(HasSubstr("bytes [4, 8)"), HasSubstr("belong to no tensor"),
                    HasSubstr("before tensor \"b\"")));
}

TEST(SafetensorsMalformedTest, GapAtTheStartOfTheBuffer) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                       std::string(8, '\0')),
              AllOf(HasSubstr("bytes [0, 4)"), HasSubstr("before tensor \"a\"")));
}

TEST(SafetensorsMalformedTest, TrailingBytesBelongToNoTensor) {
  EXPECT_THAT(RawError(kTwoTensors, std::string(20, '\0')),
              AllOf(HasSubstr("bytes [12, 20)"), HasSubstr("end of the data buffer")));
}

TEST(SafetensorsMalformedTest, ShapeTimesDtypeMismatch) {
  EXPECT_THAT(RawError(R"({"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 24]}})",
                       std::string(24, '\0')),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("BF16"), HasSubstr("[2, 3]"),
                    HasSubstr("need 12 bytes"), HasSubstr("span 24")));
}

TEST(SafetensorsMalformedTest, ShapeProductOverflows) {
  // 2^32 · 2^32 wraps to 0 in 64 bits: a naive product would accept 0 bytes.
  EXPECT_THAT(RawError(R"({"a": {"dtype": "U8", "shape": [4294967296, 4294967296], )"
                       R"("data_offsets": [0, 0]}})",
                       ""),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("overflows")));
}

TEST(SafetensorsMalformedTest, ByteSizeOverflows) {
  // 2^62 elements fit, 2^62 · 4 bytes do not.
  EXPECT_THAT(RawError(R"({"a": {"dtype": "F32", "shape": [4611686018427387904], )"
                       R"("data_offsets": [0, 0]}})",
                       ""),
              AllOf(HasSubstr("tensor \"a\""), HasSubstr("F32"), HasSubstr("overflows")));
}

TEST(SafetensorsMalformedTest, MetadataMustBeAStringMap) {
  EXPECT_THAT(RawError(R"({"__metadata__": {"format": 1}})", ""),
              AllOf(HasSubstr("\"__metadata__\" entry \"format\""), HasSubstr("got integer")));
  EXPECT_THAT(RawError(R"({"__metadata__": "pt"})", ""),
              HasSubstr("\"__metadata__\" must be an object"));
}

// Random damage to a valid file: every result is either an error or a file whose tensors all
// lie inside it and read back in full. Run under AddressSanitizer, this also checks that the
// reader never touches a byte it should not.
TEST(SafetensorsFuzzTest, DamagedFilesAreRejectedOrConsistent) {
  const std::vector<float> floats(24, 0.5f);
  const std::vector<int64_t> ints = {1, 2, 3};
  const SafetensorsWriteTensor tensors[] = {{"w", Dtype::kF32, {2, 3}, {floats.data(), 6}, {}},
                                            {"h", Dtype::kF16, {4}, {floats.data(), 4}, {}},
                                            {"b", Dtype::kBF16, {3, 1}, {floats.data(), 3}, {}},
                                            {"i", Dtype::kI16, {3}, {}, ints}};
  const std::string valid = SerializeSafetensors(tensors, {{"k", "v"}}).value();
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 5) {
        case 0:  // any byte
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:  // a digit for another digit: offsets and shapes that still parse
        case 2:
          for (size_t k = at; k < bytes.size(); ++k) {
            if (bytes[k] >= '0' && bytes[k] <= '9') {
              bytes[k] = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
          break;
        case 3:  // truncate
          bytes.resize(at);
          break;
        default:  // grow the data buffer
          bytes.append(rng() % 9, '\0');
          break;
      }
      if (bytes.empty()) break;
    }
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Parse(bytes, "fuzz");
    if (!file.ok()) {
      ASSERT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
      continue;
    }
    ++accepted;
    for (const SafetensorsTensor& t : (*file)->tensors()) {
      ASSERT_LE(t.begin, t.end);
      ASSERT_EQ((*file)->Data(t).size(),
                static_cast<size_t>(t.num_elements * DtypeSize(t.dtype)));
      const std::string& held = (*file)->bytes();
      ASSERT_EQ(held, bytes);
      ASSERT_LE((*file)->Data(t).data() + (*file)->Data(t).size(),
                reinterpret_cast<const uint8_t*>(held.data()) + held.size());
      if (IsFloatDtype(t.dtype)) {
        ASSERT_EQ((*file)->ReadFloat32(t.name)->size(), static_cast<size_t>(t.num_elements));
      } else {
        ASSERT_EQ((*file)->ReadInt64(t.name)->size(), static_cast<size_t>(t.num_elements));
      }
    }
  }
  EXPECT_GT(accepted, 0) << "some damage (to data bytes, padding) leaves a valid file";
}

// ---- The writer refuses what the reader would refuse. ----

TEST(SafetensorsWriterTest, RejectsBadTensors) {
  const std::vector<float> two = {1, 2};
  const std::vector<int64_t> big = {300};
  struct Case {
    SafetensorsWriteTensor tensor;
    std::string_view expected;
  };
  const Case cases[] = {
      {{"", Dtype::kF32, {2}, two, {}}, "not a valid tensor name"},
      {{"__metadata__", Dtype::kF32, {2}, two, {}}, "not a valid tensor name"},
      {{"w", Dtype::kF32, {3}, two, {}}, "need 3 floats"},
      {{"w", Dtype::kF32, {-2}, two, {}}, "negative dimension"},
      {{"w", Dtype::kI32, {1}, two, {}}, "need 1 ints"},
      {{"w", Dtype::kU8, {1}, {}, big}, "element 0 = 300 does not fit U8"},
  };
  for (const Case& c : cases) {
    const SafetensorsWriteTensor tensors[] = {c.tensor};
    absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors);
    ASSERT_FALSE(bytes.ok()) << c.expected;
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes.status().message(), HasSubstr(c.expected));
  }
  const SafetensorsWriteTensor twice[] = {{"w", Dtype::kF32, {2}, two, {}},
                                          {"w", Dtype::kF32, {2}, two, {}}};
  EXPECT_THAT(SerializeSafetensors(twice).status().message(), HasSubstr("duplicate"));
}

TEST(SafetensorsWriterTest, WriteToUnwritableDirectoryFails) {
  const std::vector<float> one = {1};
  const SafetensorsWriteTensor tensors[] = {{"w", Dtype::kF32, {1}, one, {}}};
  absl::Status status = WriteSafetensors("/nonexistent-dir/x/model.safetensors", tensors);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent-dir/x/model.safetensors"));
}

// ---- Half and bfloat16 conversions. ----

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(HalfFloatTest, EveryHalfWidensExactly) {
  // GCC's _Float16 is an independent oracle for IEEE binary16.
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    _Float16 oracle;
    std::memcpy(&oracle, &h, 2);
    ASSERT_TRUE(SameFloat(HalfToFloat(h), static_cast<float>(oracle))) << std::hex << bits;
  }
}

TEST(HalfFloatTest, SpecialValues) {
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // signalling NaN stays a NaN

  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie to even (2)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1023.5f, -24)), 0x8400);  // rounds up into the normals
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e30f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  const uint16_t nan = FloatToHalf(-std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(nan & 0x8000, 0x8000);
  // A NaN whose payload lives only in the low bits must not become infinity.
  EXPECT_NE(FloatToHalf(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);
}

TEST(HalfFloatTest, NarrowingMatchesTheCompilerForManyFloats) {
  std::mt19937 rng(7);
  std::vector<float> samples;
  for (uint32_t bits = 0; bits < (1u << 20); ++bits)
    samples.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Every float around the half range boundaries and subnormals, bit by bit.
  for (uint32_t base : {0x33000000u, 0x38800000u, 0x477fe000u, 0x3f800000u}) {
    for (uint32_t d = 0; d < 0x4000; ++d) {
      samples.push_back(std::bit_cast<float>(base - 0x2000 + d));
      samples.push_back(-std::bit_cast<float>(base - 0x2000 + d));
    }
  }
  for (float f : samples) {
    const _Float16 oracle = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &oracle, 2);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
    } else {
      ASSERT_EQ(FloatToHalf(f), expected) << std::hexfloat << f;
    }
  }
}

TEST(HalfFloatTest, EveryHalfRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if (std::isnan(HalfToFloat(h))) continue;
    ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << std::hex << bits;
  }
}

TEST(BFloat16Test, WideningIsTheUpperHalfOfAFloat) {
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0xc040), -3.0f);
  EXPECT_EQ(BFloat16ToFloat(0x0001), std::ldexp(1.0f, -133));    // smallest subnormal
  EXPECT_EQ(BFloat16ToFloat(0x007f), std::ldexp(127.0f, -133));  // largest subnormal
  EXPECT_EQ(BFloat16ToFloat(0x7f7f), std::ldexp(255.0f, 120));   // largest finite
  EXPECT_EQ(BFloat16ToFloat(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(BFloat16ToFloat(0xff80), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0x7fc0)));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(0xff81)));
  EXPECT_TRUE(std::signbit(BFloat16ToFloat(0x8000)));
}

TEST(BFloat16Test, NarrowingRoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, to even
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(FloatToBFloat16(std::ldexp(1.0f, -134)), 0x0000);             // tie, to even zero
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = FloatToBFloat16(std::bit_cast<float>(0x7f800001u));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(nan)));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f), bits);
  }
}

TEST(DtypeTest, NamesAndSizes) {
  EXPECT_EQ(DtypeFromName("BF16"), Dtype::kBF16);
  EXPECT_EQ(DtypeFromName("bf16"), std::nullopt);
  EXPECT_EQ(DtypeName(Dtype::kBool), "BOOL");
  EXPECT_EQ(DtypeSize(Dtype::kF64), 8);
  EXPECT_EQ(DtypeSize(Dtype::kBF16), 2);
  EXPECT_EQ(DtypeSize(Dtype::kU8), 1);
  EXPECT_TRUE(IsFloatDtype(Dtype::kF16));
  EXPECT_FALSE(IsFloatDtype(Dtype::kI64));
}

}  // namespace
}  // namespace linserve
