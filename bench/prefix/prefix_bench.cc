// The prefix-state benchmark of issue 13, against a running linserve (bench/prefix/run.sh
// starts one with and one without the cache and runs this against each):
//   chat:   a conversation of --turns turns replayed statelessly: every turn resends the whole
//           history (earlier prompts and replies) plus --turn_tokens new tokens, without a
//           session. Per turn: time to first token (client-side, and the server's Usage), the
//           prompt and cached prompt tokens.
//   shared: --users concurrent users, each sending the same --system_tokens-token system
//           prompt followed by its own --question_tokens tokens. The prompt tokens the server
//           actually fed (prompt_tokens - cached_prompt_tokens, summed over the users).
// Prompts are random token ids (fixed seed), so the figures depend on lengths, not on text.
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "client/client.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "The server, host:port.");
ABSL_FLAG(std::string, scenario, "chat", "chat or shared.");
ABSL_FLAG(int32_t, turns, 20, "chat: turns.");
ABSL_FLAG(int32_t, turn_tokens, 200, "chat: new prompt tokens per turn.");
ABSL_FLAG(int32_t, reply_tokens, 16, "Tokens generated per request.");
ABSL_FLAG(int32_t, users, 64, "shared: concurrent users.");
ABSL_FLAG(int32_t, system_tokens, 4096, "shared: tokens of the common system prompt.");
ABSL_FLAG(int32_t, question_tokens, 32, "shared: each user's own tokens after it.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random prompts.");

namespace linserve {
namespace {

struct Result {
  absl::Status status;
  std::vector<int32_t> tokens;
  double ttft_ms = -1;  // client-side
  v1::Usage usage;
};

Result Send(Client& client, const std::vector<int32_t>& prompt, int32_t reply_tokens) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  request.set_max_new_tokens(reply_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  Result r;
  const auto start = std::chrono::steady_clock::now();
  r.status = client.Generate(request, [&](const v1::GenerateResponse& m) {
    if (m.tokens_size() > 0 && r.ttft_ms < 0) {
      r.ttft_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    }
    for (const v1::GeneratedToken& t : m.tokens()) r.tokens.push_back(t.id());
    if (m.has_usage()) r.usage = m.usage();
    return true;
  });
  return r;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int32_t n, int32_t vocab,
                                  const std::vector<int32_t>& excluded) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < n) {
    const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    if (std::find(excluded.begin(), excluded.end(), id) == excluded.end()) out.push_back(id);
  }
  return out;
}

int Main() {
  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.timeout = absl::Minutes(10);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 1;
  }
  absl::StatusOr<v1::GetModelInfoResponse> info = (*client)->GetModelInfo();
  if (!info.ok()) {
    std::cerr << info.status() << "\n";
    return 1;
  }
  const int32_t vocab = info->model().vocab_size();
  const std::vector<int32_t> excluded = {info->model().bos_token_id(),
                                         info->model().eos_token_id()};
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  const int32_t reply_tokens = absl::GetFlag(FLAGS_reply_tokens);
  nlohmann::json out;
  if (absl::GetFlag(FLAGS_scenario) == "chat") {
    std::vector<int32_t> history;
    nlohmann::json turns = nlohmann::json::array();
    for (int32_t turn = 1; turn <= absl::GetFlag(FLAGS_turns); ++turn) {
      const std::vector<int32_t> user =
          RandomTokens(rng, absl::GetFlag(FLAGS_turn_tokens), vocab, excluded);
      history.insert(history.end(), user.begin(), user.end());
      const Result r = Send(**client, history, reply_tokens);
      if (!r.status.ok()) {
        std::cerr << "turn " << turn << ": " << r.status << "\n";
        return 1;
      }
      turns.push_back({{"turn", turn},
                       {"ttft_ms", r.ttft_ms},
                       {"server_ttft_ms", r.usage.time_to_first_token_us() / 1e3},
                       {"prompt_tokens", r.usage.prompt_tokens()},
                       {"cached_prompt_tokens", r.usage.cached_prompt_tokens()}});
      history.insert(history.end(), r.tokens.begin(), r.tokens.end());
    }
    out["turns"] = turns;
  } else {
    const std::vector<int32_t> system =
        RandomTokens(rng, absl::GetFlag(FLAGS_system_tokens), vocab, excluded);
    const int32_t users = absl::GetFlag(FLAGS_users);
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t u = 0; u < users; ++u) {
      std::vector<int32_t> prompt = system;
      const std::vector<int32_t> own =
          RandomTokens(rng, absl::GetFlag(FLAGS_question_tokens), vocab, excluded);
      prompt.insert(prompt.end(), own.begin(), own.end());
      prompts.push_back(std::move(prompt));
    }
    std::vector<Result> results(static_cast<size_t>(users));
    std::vector<std::unique_ptr<Client>> clients;
    for (int32_t u = 0; u < users; ++u) clients.push_back(*Client::Create(options));
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int32_t u = 0; u < users; ++u) {
      threads.emplace_back([&, u] { results[u] = Send(*clients[u], prompts[u], reply_tokens); });
    }
    for (std::thread& t : threads) t.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    int64_t prompt = 0, cached = 0, failed = 0;
    std::vector<double> ttft;
    for (const Result& r : results) {
      if (!r.status.ok()) {
        ++failed;
        continue;
      }
      prompt += r.usage.prompt_tokens();
      cached += r.usage.cached_prompt_tokens();
      ttft.push_back(r.ttft_ms);
    }
    std::sort(ttft.begin(), ttft.end());
    out = {{"users", users},
           {"failed", failed},
           {"prompt_tokens", prompt},
           {"cached_prompt_tokens", cached},
           {"prefilled_tokens", prompt - cached},
           {"seconds", seconds},
           {"ttft_ms_p50", ttft.empty() ? -1 : ttft[ttft.size() / 2]},
           {"ttft_ms_max", ttft.empty() ? -1 : ttft.back()}};
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace linserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return linserve::Main();
}
