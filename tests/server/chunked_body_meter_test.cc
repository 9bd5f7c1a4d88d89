// ChunkedBodyMeter against bodies fed whole and byte by byte: sizes summed across chunk
// extensions and trailers, the limit, and broken framing.
#include "server/transport/chunked_body_meter.h"

#include <string>

#include "gtest/gtest.h"

namespace linserve {
namespace {

using Verdict = ChunkedBodyMeter::Verdict;

// The verdict after feeding `body` in pieces of `piece` bytes (0: whole).
Verdict Feed(const std::string& body, int64_t limit, size_t piece, int64_t* total = nullptr) {
  ChunkedBodyMeter meter(limit);
  Verdict verdict = Verdict::kMore;
  if (piece == 0) {
    verdict = meter.Feed(body);
  } else {
    for (size_t at = 0; at < body.size(); at += piece) {
      verdict = meter.Feed(absl::string_view(body).substr(at, piece));
    }
  }
  if (total != nullptr) *total = meter.total();
  return verdict;
}

TEST(ChunkedBodyMeterTest, SumsChunksWhateverThePiecesTheyArriveIn) {
  const std::string body =
      "5\r\nhello\r\n1A;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n3\nxyz\n0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t piece : {0, 1, 2, 7}) {
    SCOPED_TRACE(piece);
    int64_t total = 0;
    EXPECT_EQ(Feed(body, 1000, piece, &total), Verdict::kComplete);
    EXPECT_EQ(total, 5 + 26 + 3);
  }
  // Not finished: no terminal chunk yet, or its trailers not closed.
  EXPECT_EQ(Feed("5\r\nhello\r\n", 1000, 0), Verdict::kMore);
  EXPECT_EQ(Feed("0\r\nX-Trailer: 1\r\n", 1000, 0), Verdict::kMore);
  // Bytes after the end (a pipelined request) are not looked at, only counted.
  EXPECT_EQ(Feed("0\r\n\r\nGET / HTTP/1.1\r\n", 1000, 1), Verdict::kComplete);
  ChunkedBodyMeter meter(1000);
  EXPECT_EQ(meter.Feed("1\r\nx\r\n0\r\n\r\nGET"), Verdict::kComplete);
  EXPECT_EQ(meter.left_over(), 3u);
}

TEST(ChunkedBodyMeterTest, RefusesABodyOverTheLimitAsSoonAsASizeSaysSo) {
  EXPECT_EQ(Feed("a\r\n0123456789\r\n0\r\n\r\n", 10, 1), Verdict::kComplete);
  // The second size line passes the limit: refused before its data arrives.
  EXPECT_EQ(Feed("a\r\n0123456789\r\n1\r\n", 10, 0), Verdict::kTooLarge);
  EXPECT_EQ(Feed("fffffffffffffffffff\r\n", 1 << 20, 0), Verdict::kTooLarge);
  // Leading zeros are no size.
  EXPECT_EQ(Feed("000000000000000000001\r\nx\r\n0\r\n\r\n", 10, 0), Verdict::kComplete);
}

TEST(ChunkedBodyMeterTest, RefusesBrokenFraming) {
  EXPECT_EQ(Feed("zz\r\n", 1000, 0), Verdict::kMalformed);         // not a size
  EXPECT_EQ(Feed("\r\n", 1000, 0), Verdict::kMalformed);           // no digits
  EXPECT_EQ(Feed("5x\r\n", 1000, 0), Verdict::kMalformed);         // junk after the size
  EXPECT_EQ(Feed("2\r\nabX\r\n", 1000, 0), Verdict::kMalformed);   // data longer than its size
  EXPECT_EQ(Feed(std::string(5000, '1'), 1 << 30, 0), Verdict::kMalformed);  // endless size
  EXPECT_EQ(Feed("1;" + std::string(5000, 'e'), 1000, 0), Verdict::kMalformed);  // endless line
}

}  // namespace
}  // namespace linserve
