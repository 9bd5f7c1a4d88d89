#include "engine_test_util.h"

#include <utility>

#include "absl/synchronization/notification.h"

namespace linserve {

void RecordingSink::OnToken(const GeneratedToken& token, std::string_view text) {
  absl::MutexLock lock(&mu_);
  outcome_.tokens.push_back(token.id);
  outcome_.details.push_back(token);
  outcome_.pieces.emplace_back(text);
  outcome_.text.append(text);
}

void RecordingSink::OnPromptTokens(absl::Span<const PromptToken> tokens) {
  absl::MutexLock lock(&mu_);
  outcome_.prompt_tokens.insert(outcome_.prompt_tokens.end(), tokens.begin(), tokens.end());
  outcome_.prompt_after_tokens = outcome_.prompt_after_tokens || !outcome_.tokens.empty();
}

void RecordingSink::OnFinish(const absl::Status& status, const GenerationResult& result) {
  absl::MutexLock lock(&mu_);
  ++finish_calls_;
  outcome_.status = status;
  outcome_.result = result;
  outcome_.text.append(result.text);
  finished_ = true;
}

Outcome RecordingSink::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&finished_));
  if (finish_calls_ != 1) outcome_.status = absl::InternalError("OnFinish called more than once");
  return outcome_;
}

bool RecordingSink::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&finished_), timeout);
}

void RecordingSink::WaitForTokens(size_t n) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ || outcome_.tokens.size() >= n;
  };
  mu_.Await(absl::Condition(&ready));
}

size_t RecordingSink::token_count() const {
  absl::MutexLock lock(&mu_);
  return outcome_.tokens.size();
}

Outcome RunRequest(Engine& engine, GenerateRequest request) {
  auto sink = std::make_shared<RecordingSink>();
  absl::StatusOr<JobId> job = engine.Submit(std::move(request), sink);
  if (!job.ok()) {
    Outcome rejected;
    rejected.status = job.status();
    return rejected;
  }
  return sink->Wait();
}

namespace {

template <typename T, typename Start>
absl::StatusOr<T> Call(Start start) {
  absl::Notification done;
  absl::StatusOr<T> out = absl::UnknownError("no reply");
  start([&](absl::StatusOr<T> result) {
    out = std::move(result);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

}  // namespace

absl::StatusOr<SessionInfo> CreateSession(Engine& engine, const std::string& tenant,
                                          std::optional<SessionId> id) {
  return Call<SessionInfo>([&](auto cb) { engine.CreateSession(tenant, std::move(cb), id); });
}

absl::StatusOr<SessionInfo> GetSession(Engine& engine, const SessionId& id,
                                       const std::string& tenant) {
  return Call<SessionInfo>([&](auto cb) { engine.GetSession(tenant, id, std::move(cb)); });
}

absl::StatusOr<SessionInfo> ForkSession(Engine& engine, const SessionId& id,
                                        const std::string& tenant) {
  return Call<SessionInfo>([&](auto cb) { engine.ForkSession(tenant, id, std::move(cb)); });
}

absl::StatusOr<SessionInfo> ForkSessionAt(Engine& engine, const SessionId& id, int64_t num_tokens,
                                          const std::string& tenant) {
  return Call<SessionInfo>(
      [&](auto cb) { engine.ForkSessionAt(tenant, id, num_tokens, std::move(cb)); });
}

absl::StatusOr<SessionInfo> RewindSession(Engine& engine, const SessionId& id, int64_t num_tokens,
                                          const std::string& tenant) {
  return Call<SessionInfo>(
      [&](auto cb) { engine.RewindSession(tenant, id, num_tokens, std::move(cb)); });
}

absl::Status DeleteSession(Engine& engine, const SessionId& id, const std::string& tenant) {
  absl::Notification done;
  absl::Status out;
  engine.DeleteSession(tenant, id, [&](absl::Status status) {
    out = status;
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

absl::StatusOr<std::string> ExportSession(Engine& engine, const SessionId& id,
                                          const std::string& tenant) {
  return Call<std::string>([&](auto cb) { engine.ExportSession(tenant, id, std::move(cb)); });
}

absl::StatusOr<SessionInfo> ImportSession(Engine& engine, const std::string& bytes,
                                          const std::string& tenant, std::optional<SessionId> id) {
  return Call<SessionInfo>(
      [&](auto cb) { engine.ImportSession(tenant, bytes, std::move(cb), id); });
}

absl::StatusOr<SessionPage> ListSessions(Engine& engine, std::optional<SessionId> after,
                                         int32_t limit, const std::string& tenant) {
  return Call<SessionPage>(
      [&](auto cb) { engine.ListSessions(tenant, after, limit, std::move(cb)); });
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    int extra = 0;
    if (c < 0x80) {
      extra = 0;
    } else if ((c >> 5) == 0x6) {
      extra = 1;
    } else if ((c >> 4) == 0xE) {
      extra = 2;
    } else if ((c >> 3) == 0x1E) {
      extra = 3;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return false;
    }
    i += extra + 1;
  }
  return true;
}

}  // namespace linserve
