// Model: a loaded model directory (config.json + model.safetensors [+ tokenizer.model]).
#ifndef LINSERVE_MODEL_MODEL_H_
#define LINSERVE_MODEL_MODEL_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/format/config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/format/weights.h"

namespace linserve {

struct Model {
  std::string directory;
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  // Hex SHA-256 of config.json and model.safetensors bytes: binds exported session state to
  // the exact model that produced it.
  std::string fingerprint;
};

// Loads and validates a model directory. Errors name the file and the offending field/tensor.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory);

// The fingerprint LoadModel computes for a directory whose config.json and model.safetensors
// hold these bytes: lower-case hex SHA-256 of their concatenation.
std::string ModelFingerprint(std::string_view config_json, std::string_view weights_file);

}  // namespace linserve

#endif  // LINSERVE_MODEL_MODEL_H_
