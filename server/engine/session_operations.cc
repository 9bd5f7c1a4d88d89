#include "server/engine/session_operations.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/constraints/grammar_matcher.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

// A tenant as logs name it: "tenant NAME", or "the default tenant" without authentication.
std::string TenantForLog(absl::string_view tenant) {
  return tenant.empty() ? std::string("the default tenant") : absl::StrCat("tenant ", tenant);
}

}  // namespace

absl::Status CheckSnapshotConstraint(ConstraintCache& cache, const ConstraintState& state) {
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      cache.Get(state.spec, "snapshot constraint");
  if (!compiled.ok()) {
    return absl::InvalidArgumentError(compiled.status().message());
  }
  if (absl::StatusOr<GrammarMatcher> matcher =
          GrammarMatcher::Deserialize(*std::move(compiled), state.matcher);
      !matcher.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot constraint: ", matcher.status().message()));
  }
  return absl::OkStatus();
}

SessionOperations::SessionOperations(Inbox& inbox, SessionStore& store,
                                     TurnBoundaries& boundaries, SlotReads& reads,
                                     Backend& backend, const Model& model,
                                     ConstraintCache& constraints, int32_t max_prompt_tokens)
    : inbox_(inbox),
      store_(store),
      boundaries_(boundaries),
      reads_(reads),
      backend_(backend),
      model_(model),
      constraints_(constraints),
      max_prompt_tokens_(max_prompt_tokens) {}

void SessionOperations::Post(Inbox::Op op, const std::string& tenant) {
  inbox_
      .Post(
          [this, op = std::move(op)](absl::Status admitted) mutable {
            if (admitted.ok()) reads_.Land(/*wait=*/true);
            std::move(op)(std::move(admitted));
          },
          /*is_request=*/false, tenant)
      .IgnoreError();
}

template <typename Done>
Done SessionOperations::SettleFirst(Done done) {
  return [this, done = std::move(done)](auto result) mutable {
    // Replied on the engine thread (not through WhenDurable, which settles itself): the
    // operation's session locks go back before the client hears of it.
    if (inbox_.OnEngineThread()) store_.SettleLocks();
    std::move(done)(std::move(result));
  };
}

template <typename T>
void SessionOperations::Reply(std::vector<SessionId> changed, Callback<T> done, T value) {
  store_.WhenDurable(std::move(changed), [done = std::move(done), value = std::move(value)](
                                             absl::Status written) mutable {
    if (!written.ok()) return std::move(done)(std::move(written));
    std::move(done)(std::move(value));
  });
}

SessionInfo SessionOperations::InfoOf(const Session& session) const {
  SessionInfo info = SessionStore::InfoOf(session);
  info.boundaries = boundaries_.Boundaries(session.id);
  return info;
}

absl::StatusOr<Session*> SessionOperations::FindIdle(const SessionId& id,
                                                     absl::string_view tenant) {
  absl::StatusOr<Session*> session = store_.Find(id, tenant);
  if (!session.ok()) return session;
  if ((*session)->busy) {
    return absl::AbortedError(absl::StrCat("session ", id.value, " is busy with request ",
                                           (*session)->busy_request_id,
                                           "; retry when it has finished"));
  }
  return session;
}

void SessionOperations::Create(std::string tenant, Callback<SessionInfo> done,
                               std::optional<SessionId> id) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, done = std::move(done), id = std::move(id)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = store_.Create(absl::Now(), tenant, std::move(id));
        if (!session.ok()) return std::move(done)(session.status());
        spdlog::info("session {}: created for {}", (*session)->id.value, TenantForLog(tenant));
        Reply({(*session)->id}, std::move(done), InfoOf(**session));
      },
      tenant);
}

void SessionOperations::Get(std::string tenant, SessionId id, Callback<SessionInfo> done) {
  Post(
      [this, tenant, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<SessionInfo> info = store_.Info(id, tenant);
        if (info.ok()) info->boundaries = boundaries_.Boundaries(id);
        std::move(done)(std::move(info));
      },
      tenant);
}

void SessionOperations::List(std::string tenant, std::optional<SessionId> after, int32_t limit,
                             Callback<SessionPage> done) {
  Post(
      [this, tenant, after = std::move(after), limit,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        SessionPage page;
        page.sessions = store_.List(after, limit, tenant);
        for (SessionInfo& info : page.sessions) info.boundaries = boundaries_.Boundaries(info.id);
        if (!page.sessions.empty() && store_.HasAfter(page.sessions.back().id, tenant)) {
          page.next_after = page.sessions.back().id;
        }
        std::move(done)(std::move(page));
      },
      tenant);
}

void SessionOperations::Fork(std::string tenant, SessionId id, Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        // The source is the forker's, so the fork (which keeps the source's tenant) is too.
        absl::StatusOr<Session*> source = FindIdle(id, tenant);
        if (!source.ok()) return std::move(done)(source.status());
        absl::StatusOr<Session*> fork = store_.Fork(**source, absl::Now());
        if (!fork.ok()) return std::move(done)(fork.status());
        spdlog::info("session {}: forked from {} for {}", (*fork)->id.value, id.value,
                     TenantForLog(tenant));
        Reply({(*fork)->id}, std::move(done), InfoOf(**fork));
      },
      tenant);
}

absl::StatusOr<SessionSnapshot> SessionOperations::SessionAt(const Session& session,
                                                             int64_t num_tokens) const {
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_tokens must be >= 0, got ", num_tokens));
  }
  if (num_tokens == session.history.num_tokens()) return store_.Snapshot(session);
  return boundaries_.At(session.id, num_tokens, model_.config.StateFloatsPerSlot());
}

void SessionOperations::Erase(Session* session) {
  boundaries_.Erase(session->id);
  store_.Erase(session);
}

void SessionOperations::ForkAt(std::string tenant, SessionId id, int64_t num_tokens,
                               Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, id = std::move(id), num_tokens,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> source = FindIdle(id, tenant);
        if (!source.ok()) return std::move(done)(source.status());
        absl::StatusOr<SessionSnapshot> at = SessionAt(**source, num_tokens);
        if (!at.ok()) return std::move(done)(at.status());
        const absl::Time now = absl::Now();
        at->create_time = absl::FromUnixMicros(absl::ToUnixMicros(now));
        absl::StatusOr<Session*> fork = store_.Insert(*std::move(at), now, tenant);
        if (!fork.ok()) return std::move(done)(fork.status());
        spdlog::info("session {}: forked from {} at {} tokens for {}", (*fork)->id.value, id.value,
                     num_tokens, TenantForLog(tenant));
        Reply({(*fork)->id}, std::move(done), InfoOf(**fork));
      },
      tenant);
}

void SessionOperations::Rewind(std::string tenant, SessionId id, int64_t num_tokens,
                               Callback<SessionInfo> done) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, id = std::move(id), num_tokens,
       done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> found = FindIdle(id, tenant);
        if (!found.ok()) return std::move(done)(found.status());
        Session& session = **found;
        if (num_tokens == session.history.num_tokens()) {
          return Reply({id}, std::move(done), InfoOf(session));
        }
        absl::StatusOr<SessionSnapshot> at = SessionAt(session, num_tokens);
        if (!at.ok()) return std::move(done)(at.status());
        session.history = SessionHistory(at->num_tokens, std::move(at->pending), at->token_counts);
        session.constraint = std::move(at->constraint);
        if (session.slot.has_value()) {
          absl::Status status = backend_.WriteSlot(*session.slot, at->state);
          if (status.ok()) {
            status = backend_.SetSeenCounts(*session.slot, session.history.SeenCounts());
          }
          if (!status.ok()) {
            spdlog::error("session {}: rewind failed in the backend: {}", id.value,
                          status.ToString());
            Erase(&session);
            return std::move(done)(absl::InternalError(
                absl::StrCat("the model backend failed: ", status.message(),
                             "; the session's state is unknown and the session was deleted")));
          }
        } else {
          session.hibernated = std::move(at->state);
        }
        boundaries_.DropAfter(id, num_tokens);
        store_.Touch(session, absl::Now());
        spdlog::info("session {}: rewound to {} tokens by {}", id.value, num_tokens,
                     TenantForLog(tenant));
        Reply({id}, std::move(done), InfoOf(session));
      },
      tenant);
}

void SessionOperations::Delete(std::string tenant, SessionId id, StatusCallback done) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = FindIdle(id, tenant);
        if (!session.ok()) return std::move(done)(session.status());
        Erase(*session);
        spdlog::info("session {}: deleted by {}", id.value, TenantForLog(tenant));
        store_.WhenDurable({id}, std::move(done));
      },
      tenant);
}

void SessionOperations::Export(std::string tenant, SessionId id, Callback<std::string> done) {
  done = SettleFirst(std::move(done));
  Post(
      [this, tenant, id = std::move(id), done = std::move(done)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session = FindIdle(id, tenant);
        if (!session.ok()) return std::move(done)(session.status());
        absl::StatusOr<SessionSnapshot> snapshot = store_.Snapshot(**session);
        if (!snapshot.ok()) return std::move(done)(snapshot.status());
        // The touch is not the export's change: a failed write of it does not fail the export.
        store_.Touch(**session, absl::Now());
        Reply({}, std::move(done), EncodeSnapshot(*snapshot, model_.fingerprint));
      },
      tenant);
}

void SessionOperations::Import(std::string tenant, absl::string_view bytes,
                               Callback<SessionInfo> done, std::optional<SessionId> id) {
  done = SettleFirst(std::move(done));
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSnapshot(bytes, model_.config, model_.fingerprint,
                     max_prompt_tokens_);
  if (!snapshot.ok()) return std::move(done)(snapshot.status());
  if (snapshot->constraint.has_value()) {
    if (absl::Status s = CheckSnapshotConstraint(constraints_, *snapshot->constraint); !s.ok()) {
      return std::move(done)(s);
    }
  }
  Post(
      [this, tenant, snapshot = *std::move(snapshot), done = std::move(done),
       id = std::move(id)](absl::Status admitted) mutable {
        if (!admitted.ok()) return std::move(done)(admitted);
        absl::StatusOr<Session*> session =
            store_.Insert(std::move(snapshot), absl::Now(), tenant, std::move(id));
        if (!session.ok()) return std::move(done)(session.status());
        spdlog::info("session {}: imported ({} tokens) for {}", (*session)->id.value,
                     (*session)->history.num_tokens(), TenantForLog(tenant));
        Reply({(*session)->id}, std::move(done), InfoOf(**session));
      },
      tenant);
}

}  // namespace linserve
