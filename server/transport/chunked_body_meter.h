// ChunkedBodyMeter: follows a request body in HTTP/1.1 chunked transfer coding (RFC 9112 §7.1)
// as its bytes arrive, summing the chunk sizes, so that the OpenAI server refuses a body over
// its limit (or with broken framing) itself, in its JSON, before evhttp has read it whole.
// Tolerant as evhttp is: a line ends at "\n" (a "\r" before it is dropped), a chunk-size line is
// hexadecimal digits, optionally followed by extensions; trailers end at an empty line.
#ifndef LINSERVE_SERVER_TRANSPORT_CHUNKED_BODY_METER_H_
#define LINSERVE_SERVER_TRANSPORT_CHUNKED_BODY_METER_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace linserve {

class ChunkedBodyMeter {
 public:
  enum class Verdict { kMore, kComplete, kTooLarge, kMalformed };

  // `limit`: the most bytes of chunk data the body may hold.
  explicit ChunkedBodyMeter(int64_t limit) : limit_(limit) {}

  // Consumes the body's next bytes. Once the verdict is not kMore it stays; bytes after the
  // body's end (a pipelined request) are not looked at, only counted (left_over).
  Verdict Feed(absl::string_view bytes);
  // Chunk data bytes so far.
  int64_t total() const { return total_; }
  // Bytes of the Feed that completed the body that came after its end.
  size_t left_over() const { return left_over_; }

 private:
  enum class Phase { kSizeLine, kData, kDataEnd, kTrailers };
  // A chunk-size line is complete (in line_).
  void SizeLine();

  const int64_t limit_;
  Phase phase_ = Phase::kSizeLine;
  Verdict verdict_ = Verdict::kMore;
  int64_t remaining_ = 0;  // of the current chunk's data
  int64_t total_ = 0;
  size_t left_over_ = 0;
  std::string line_;  // the size or trailer line so far
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_CHUNKED_BODY_METER_H_
