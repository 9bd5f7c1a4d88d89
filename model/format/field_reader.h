// FieldReader: reads the fields of one config.json object, remembering which keys it consumed so
// that the rest can be reported as unknown. Every error names the source file, the field (with
// its path inside the file, e.g. "layers[3].mixer.n_heads") and the limit. Internal to
// linserve_model_format.
#ifndef LINSERVE_MODEL_FORMAT_FIELD_READER_H_
#define LINSERVE_MODEL_FORMAT_FIELD_READER_H_

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "model/layers/param.h"
#include "nlohmann/json.hpp"

namespace linserve {

class FieldReader {
 public:
  // `path`: how the file reaches `object`, with a trailing dot ("layers[3].mixer."); empty at
  // the top level.
  FieldReader(const nlohmann::json& object, std::string_view source, std::string path = "");

  absl::Status Error(std::string_view field, std::string_view message) const;

  // The value of `field`, or nullptr when absent.
  const nlohmann::json* Find(std::string_view field);

  // Absent fields leave `out` as it is, or are an error when `required`.
  absl::Status Int(std::string_view field, int64_t min, int64_t max, bool required, int32_t& out);
  absl::Status Bool(std::string_view field, bool& out);
  // A number in (0, 1].
  absl::Status Epsilon(std::string_view field, double& out);
  // One of `names`; `out` is the index of the name given.
  absl::Status Choice(std::string_view field, const std::vector<std::string>& names, int& out);

  // One parameter of a layer component, checked against its spec; an absent one takes its
  // default (a default_from parameter must already be in `values`).
  absl::Status Param(const ParamSpec& spec, ParamValues& values);

  // Every key of the object that no reader asked for.
  absl::Status RejectUnknown() const;

 private:
  absl::Status OutOfRange(std::string_view field, const nlohmann::json& value,
                          std::string_view range) const;
  absl::Status Integer(std::string_view field, int64_t min, int64_t max, bool required,
                       int64_t& out);
  absl::Status Number(std::string_view field, const ParamSpec& spec, double& out);

  const nlohmann::json& object_;
  std::string source_;
  std::string path_;
  std::set<std::string> consumed_;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_FIELD_READER_H_
