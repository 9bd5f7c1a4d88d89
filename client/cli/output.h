// How linserve-cli prints the server's messages: proto3 JSON for machines, aligned text for
// people.
#ifndef LINSERVE_CLIENT_CLI_OUTPUT_H_
#define LINSERVE_CLIENT_CLI_OUTPUT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "linserve/v1/model.pb.h"
#include "linserve/v1/session.pb.h"

namespace linserve::cli {

enum class Format { kText, kJson };

// "text" or "json"; errors name `flag`.
absl::StatusOr<Format> ParseFormat(absl::string_view text, absl::string_view flag);

// One line of proto3 JSON with the .proto field names and every field, even when zero.
std::string ToJson(const google::protobuf::Message& message);

// "RESIDENT" / "HIBERNATED" / "UNSPECIFIED".
std::string ResidencyName(const v1::Session& session);

// "key: value" lines: id, tokens, residency, busy, created, last used.
std::string FormatSession(const v1::Session& session);

// The header and one row per session of `sessions list`.
std::string SessionTableHeader();
std::string FormatSessionRow(const v1::Session& session);

// Model, server limits and load, as "key: value" lines; one line per layer ("layer 3: mixer
// KIND(PARAM=VALUE, ...); norm ...; mlp ...; state N bytes") and the final norm. The heads, d_ff,
// feature map and activation lines only for a single-block model (docs/clients.md).
std::string FormatModelInfo(const v1::GetModelInfoResponse& info);

}  // namespace linserve::cli

#endif  // LINSERVE_CLIENT_CLI_OUTPUT_H_
