// Helpers for driving an Engine synchronously in tests.
#ifndef LINSERVE_TESTS_SERVER_ENGINE_TEST_UTIL_H_
#define LINSERVE_TESTS_SERVER_ENGINE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/engine/engine.h"
#include "server/engine/token_sink.h"

namespace linserve {

// What a request produced, as a client would have seen it.
struct Outcome {
  absl::Status status;
  std::vector<TokenId> tokens;
  std::vector<GeneratedToken> details;
  std::vector<std::string> pieces;  // text delivered with each token
  std::string text;                 // all text, the final flush included
  GenerationResult result;
  // OnPromptTokens's tokens, in order; and whether any came after a generated token.
  std::vector<PromptToken> prompt_tokens;
  bool prompt_after_tokens = false;
};

class RecordingSink : public TokenSink {
 public:
  void OnToken(const GeneratedToken& token, std::string_view text) override;
  void OnPromptTokens(absl::Span<const PromptToken> tokens) override;
  void OnFinish(const absl::Status& status, const GenerationResult& result) override;

  // Blocks until OnFinish.
  Outcome Wait();
  // Blocks until OnFinish or `timeout`; says whether it came.
  bool WaitFor(absl::Duration timeout);
  // Blocks until at least `n` tokens arrived (or the request finished).
  void WaitForTokens(size_t n);
  size_t token_count() const;

 private:
  mutable absl::Mutex mu_;
  Outcome outcome_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int finish_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Submits and waits; a Submit error is returned as the outcome's status.
Outcome RunRequest(Engine& engine, GenerateRequest request);

// Session operations waited for, on behalf of `tenant` ("" = the default tenant).
// `id`: the id the client proposes (nullopt: the engine picks one).
absl::StatusOr<SessionInfo> CreateSession(Engine& engine, const std::string& tenant = "",
                                          std::optional<SessionId> id = std::nullopt);
absl::StatusOr<SessionInfo> GetSession(Engine& engine, const SessionId& id,
                                       const std::string& tenant = "");
absl::StatusOr<SessionInfo> ForkSession(Engine& engine, const SessionId& id,
                                        const std::string& tenant = "");
absl::StatusOr<SessionInfo> ForkSessionAt(Engine& engine, const SessionId& id, int64_t num_tokens,
                                          const std::string& tenant = "");
absl::StatusOr<SessionInfo> RewindSession(Engine& engine, const SessionId& id, int64_t num_tokens,
                                          const std::string& tenant = "");
absl::Status DeleteSession(Engine& engine, const SessionId& id, const std::string& tenant = "");
absl::StatusOr<std::string> ExportSession(Engine& engine, const SessionId& id,
                                          const std::string& tenant = "");
absl::StatusOr<SessionInfo> ImportSession(Engine& engine, const std::string& bytes,
                                          const std::string& tenant = "",
                                          std::optional<SessionId> id = std::nullopt);
absl::StatusOr<SessionPage> ListSessions(Engine& engine, std::optional<SessionId> after,
                                         int32_t limit, const std::string& tenant = "");

// True if `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_ENGINE_TEST_UTIL_H_
