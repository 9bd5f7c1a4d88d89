// What the fuzz targets and their seed generator (make_seeds.cc) agree on: the model a snapshot or
// a request is checked against, and how a snapshot target input maps to snapshot bytes.
#ifndef LINSERVE_TESTS_FUZZ_FUZZ_INPUTS_H_
#define LINSERVE_TESTS_FUZZ_FUZZ_INPUTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/format/config.h"
#include "server/engine/request.h"

namespace linserve::fuzz {

// A model small enough that the fuzzer can write a whole state: byte tokenizer (vocab 260, BOS 256,
// EOS 257), 1 layer, 2 heads of 2, feature_dim 2: 2 · 2 · (2 + 1) = 12 state floats.
ModelConfig FuzzConfig();

// The fingerprint snapshots are bound to (any 64 hex digits: the fuzz targets load no files).
inline constexpr char kFingerprint[] =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
inline constexpr int64_t kMaxPendingTokens = 64;

// Limits small enough for the fuzzer to reach every bound.
RequestLimits FuzzLimits();

// Snapshot target input: a first byte, then the rest. First byte even: the rest is a snapshot
// without its trailing SHA-256, which SnapshotBytes appends, so the fuzzer explores the fields
// behind the checksum. Odd: the rest is used as is (checksum and all).
std::string SnapshotBytes(std::string_view input);
// The inverse for seeds: "\0" + `snapshot` without its checksum.
std::string SnapshotInput(std::string_view snapshot);

}  // namespace linserve::fuzz

#endif  // LINSERVE_TESTS_FUZZ_FUZZ_INPUTS_H_
