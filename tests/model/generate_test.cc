// linserve-generate end to end: the real binary on a tiny random model written to disk.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "model/backend/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = TinyConfig();
    config_.bos_token_id = 256;
    config_.tie_embeddings = false;  // untied random models do not just echo their input
    WriteModel(model_dir_, config_);
  }

  static void WriteModel(const std::string& dir, const ModelConfig& config) {
    ASSERT_TRUE(WriteModelDirectory(dir, config, MakeRandomWeights(config, 21)).ok());
  }

  // Runs the binary with `args` (already shell-quoted as needed).
  ProcessResult Generate(const std::string& args) {
    const std::string out = tmp_.Join("stdout"), err = tmp_.Join("stderr");
    const std::string cmd = std::string(LINSERVE_GENERATE_BIN) + " " + args + " >" + out +
                            " 2>" + err;
    const int status = std::system(cmd.c_str());
    ProcessResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  // What the library produces for the same request, streamed the same way, with the prefill
  // in chunks of `chunk_size` as the tool's --chunk_size (other chunks agree only up to
  // rounding, which a sampled draw can turn into another token).
  std::string Expected(const std::string& dir, const std::string& prompt,
                       const SamplingParams& params, int max_new_tokens, int chunk_size) {
    absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(dir);
    EXPECT_TRUE(model.ok()) << model.status();
    BackendOptions options;
    options.prefill_chunk_size = chunk_size;
    std::unique_ptr<Backend> backend = *CreateCpuBackend(**model, options);
    const SlotId slot = *backend->AllocateSlot();
    std::vector<TokenId> tokens = {(*model)->config.bos_token_id};
    const std::vector<TokenId> encoded = *(*model)->tokenizer->Encode(prompt);
    tokens.insert(tokens.end(), encoded.begin(), encoded.end());
    std::vector<float> logits((*model)->config.vocab_size);
    EXPECT_TRUE(backend->Prefill(slot, tokens, absl::MakeSpan(logits)).ok());
    Sampler sampler(params);
    sampler.Observe(tokens);
    StreamingDetokenizer detok(*(*model)->tokenizer);
    std::string text;
    for (int i = 0; i < max_new_tokens; ++i) {
      const TokenId t = sampler.Sample(logits);
      text += detok.Push(t);
      const DecodeItem item{slot, t};
      EXPECT_TRUE(backend->Decode({&item, 1}, absl::MakeSpan(logits)).ok());
    }
    return text + detok.Flush();
  }

  ScopedTempDir tmp_;
  std::string model_dir_ = tmp_.Join("model");
  ModelConfig config_;
};

TEST_F(GenerateTest, HelpDocumentsEveryFlagAndExitsZero) {
  const ProcessResult r = Generate("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--model", "--prompt", "--max_new_tokens", "--temperature", "--top_k", "--top_p",
        "--min_p", "--repetition_penalty", "--presence_penalty", "--frequency_penalty", "--seed",
        "--chunk_size", "--threads", "--stop_at_eos"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST_F(GenerateTest, StreamsWhatTheLibraryGeneratesDeterministicallyPerSeed) {
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 50;
  params.top_p = 0.95f;
  params.repetition_penalty = 1.1f;
  params.seed = 7;
  const std::string flags = "--model=" + model_dir_ +
                            " --prompt='Once upon' --max_new_tokens=40 --temperature=0.9"
                            " --top_k=50 --top_p=0.95 --repetition_penalty=1.1 --chunk_size=3";
  const ProcessResult r = Generate(flags + " --seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out, Expected(model_dir_, "Once upon", params, 40, /*chunk_size=*/3));
  EXPECT_THAT(r.err, HasSubstr("generated: 40 tokens"));
  EXPECT_EQ(Generate(flags + " --seed=7").out, r.out);
  EXPECT_NE(Generate(flags + " --seed=8").out, r.out);
}

TEST_F(GenerateTest, StopsAtEosUnlessToldNot) {
  // Make the greedy first token the model's EOS.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  absl::StatusOr<std::unique_ptr<Model>> model = LoadModel(model_dir_);
  ASSERT_TRUE(model.ok());
  std::unique_ptr<Backend> backend = *CreateCpuBackend(**model, BackendOptions{});
  const SlotId slot = *backend->AllocateSlot();
  std::vector<TokenId> prompt = {256};
  const std::vector<TokenId> encoded = *(*model)->tokenizer->Encode("ab");
  prompt.insert(prompt.end(), encoded.begin(), encoded.end());
  std::vector<float> logits(config_.vocab_size);
  ASSERT_TRUE(backend->Prefill(slot, prompt, absl::MakeSpan(logits)).ok());
  ModelConfig eos_config = config_;
  eos_config.eos_token_id = Sampler(greedy).Sample(logits);
  const std::string dir = tmp_.Join("eos_model");
  WriteModel(dir, eos_config);

  ProcessResult r = Generate("--model=" + dir + " --prompt=ab --temperature=0 --max_new_tokens=5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("generated: 0 tokens"));
  r = Generate("--model=" + dir +
               " --prompt=ab --temperature=0 --max_new_tokens=5 --stop_at_eos=false");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generated: 5 tokens"));
}

TEST_F(GenerateTest, BadInputIsAMessageAndExitOneNeverACrash) {
  const std::string model = "--model=" + model_dir_ + " --prompt=hi ";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {model + "--top_p=2", "--top_p = 2 is outside (0, 1]"},
      {model + "--temperature=-1", "--temperature = -1"},
      {model + "--top_k=-3", "--top_k = -3"},
      {model + "--min_p=7", "--min_p = 7"},
      {model + "--repetition_penalty=0", "--repetition_penalty = 0"},
      {model + "--presence_penalty=3", "--presence_penalty = 3"},
      {model + "--frequency_penalty=-9", "--frequency_penalty = -9"},
      {model + "--max_new_tokens=-1", "--max_new_tokens = -1 is outside [0, 1048576]"},
      {model + "--chunk_size=0", "--chunk_size = 0 is outside [1, 4096]"},
      {model + "--threads=5000", "--threads = 5000 is outside [0, 1024]"},
      {model + "--top_k=abc", "top_k"},
      {model + "--no_such_flag=1", "no_such_flag"},
      {model + "stray", "unexpected argument 'stray'"},
      {"--model=" + tmp_.Join("missing") + " --prompt=hi", "--model " + tmp_.Join("missing")},
  };
  for (const Case& c : cases) {
    const ProcessResult r = Generate(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST_F(GenerateTest, EmptyPromptNeedsABosToken) {
  EXPECT_EQ(Generate("--model=" + model_dir_ + " --prompt= --max_new_tokens=3").exit_code, 0);
  ModelConfig no_bos = config_;
  no_bos.bos_token_id = -1;
  const std::string dir = tmp_.Join("no_bos");
  WriteModel(dir, no_bos);
  const ProcessResult r = Generate("--model=" + dir + " --prompt= --max_new_tokens=3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--prompt is empty and the model has no bos_token_id"));
}

TEST_F(GenerateTest, LearnedPositionsBoundThePromptAndTheOutput) {
  ModelConfig learned = config_;
  learned.position = PositionEmbedding::kLearned;
  learned.max_position = 8;
  const std::string dir = tmp_.Join("learned");
  WriteModel(dir, learned);
  ProcessResult r = Generate("--model=" + dir + " --prompt=abcdefghij");  // 11 tokens with BOS
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--prompt is 11 tokens; the model's learned positions end at 8"));
  // BOS + 3 prompt tokens leave 4 positions; the 5th token is sampled but never fed back.
  r = Generate("--model=" + dir + " --prompt=abc --max_new_tokens=50 --stop_at_eos=false");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("capped to 5"));
  EXPECT_THAT(r.err, HasSubstr("generated: 5 tokens"));
}

}  // namespace
}  // namespace linserve
