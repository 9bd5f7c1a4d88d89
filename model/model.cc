#include "model/model.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/format/file_io.h"
#include "model/format/safetensors.h"
#include "model/tokenizer/load_tokenizer.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

constexpr char kConfigFile[] = "config.json";
constexpr char kWeightsFile[] = "model.safetensors";

}  // namespace

std::string ModelFingerprint(std::string_view config_json, std::string_view weights_file) {
  // SHA-256 through OpenSSL's EVP interface; it fails only on allocation failure.
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), config_json.data(), config_json.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), weights_file.data(), weights_file.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) {
    spdlog::critical("OpenSSL SHA-256 failed");
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    return absl::NotFoundError(absl::StrCat(directory, ": not a model directory (expected ",
                                            kConfigFile, " and ", kWeightsFile, " inside)"));
  }
  const std::filesystem::path dir(directory);
  const std::string config_path = (dir / kConfigFile).string();
  const std::string weights_path = (dir / kWeightsFile).string();

  absl::StatusOr<std::string> config_text = ReadFileToString(config_path);
  if (!config_text.ok()) return config_text.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*config_text, config_path);
  if (!config.ok()) return config.status();

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(weights_path);
  if (!file.ok()) return file.status();
  absl::StatusOr<ModelWeights> weights = ReadModelWeights(*config, **file);
  if (!weights.ok()) return weights.status();

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(*config, directory);
  if (!tokenizer.ok()) return tokenizer.status();

  auto model = std::make_unique<Model>();
  model->directory = directory;
  model->config = *std::move(config);
  model->weights = *std::move(weights);
  model->tokenizer = *std::move(tokenizer);
  model->fingerprint = ModelFingerprint(*config_text, (*file)->bytes());
  spdlog::info("loaded model {}: {} layers, d_model {}, vocab {}, {} parameters, fingerprint {}",
               directory, model->config.n_layers, model->config.d_model, model->config.vocab_size,
               model->weights.ParameterCount(), model->fingerprint.substr(0, 16));
  return model;
}

}  // namespace linserve
