#include "tests/fuzz/fuzz_inputs.h"

#include "openssl/sha.h"

namespace linserve::fuzz {

ModelConfig FuzzConfig() {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 2;
  c.head_dim = 2;
  c.feature_dim = 2;
  c.d_ff = 8;
  c.bos_token_id = 256;
  c.eos_token_id = 257;
  return c;
}

RequestLimits FuzzLimits() {
  RequestLimits limits;
  limits.max_new_tokens = 64;
  limits.max_prompt_tokens = 256;
  limits.max_prompt_bytes = 1024;
  limits.max_stop_strings = 4;
  limits.max_stop_string_bytes = 16;
  limits.max_stop_token_ids = 8;
  limits.max_top_logprobs = 5;
  return limits;
}

std::string SnapshotBytes(std::string_view input) {
  if (input.empty()) return std::string();
  std::string bytes(input.substr(1));
  if ((static_cast<unsigned char>(input[0]) & 1) == 0) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
    bytes.append(reinterpret_cast<const char*>(digest), sizeof(digest));
  }
  return bytes;
}

std::string SnapshotInput(std::string_view snapshot) {
  std::string input(1, '\0');
  input.append(snapshot.substr(0, snapshot.size() - SHA256_DIGEST_LENGTH));
  return input;
}

}  // namespace linserve::fuzz
