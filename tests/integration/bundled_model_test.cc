// The bundled model served end to end. Its SentencePiece tokenizer is what once aborted the
// server at start-up: libsentencepiece's private protobuf met gRPC's (model/tokenizer/sentencepiece_model.h).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "tests/integration/test_server.h"

namespace linserve {
namespace {

TEST(BundledModelTest, ServesTextPromptsThroughItsSentencePieceTokenizer) {
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(LINSERVE_DEFAULT_MODEL_DIR);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->config.tokenizer, TokenizerKind::kSentencePiece);
  TestServer server(**model);

  const std::string text = "ROMEO: Is the day so young?";
  absl::StatusOr<std::vector<int32_t>> ids = server.client().Tokenize(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GT(ids->size(), 3u);
  absl::StatusOr<std::string> back = server.client().Detokenize(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(*back, testing::HasSubstr(text));

  v1::GenerateRequest request;
  request.set_text("ROMEO:");
  request.set_max_new_tokens(24);
  request.mutable_sampling()->set_seed(7);
  const Streamed streamed = RunGenerate(server.client(), request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status;
  EXPECT_EQ(streamed.tokens.size(), 24u);
  EXPECT_FALSE(streamed.text.empty());
}

}  // namespace
}  // namespace linserve
