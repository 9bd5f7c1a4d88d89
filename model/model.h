// Model: a loaded model directory (config.json + model.safetensors [+ tokenizer.model]).
#ifndef LINSERVE_MODEL_MODEL_H_
#define LINSERVE_MODEL_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "model/tokenizer.h"
#include "model/weights.h"

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

}  // namespace linserve

#endif  // LINSERVE_MODEL_MODEL_H_
