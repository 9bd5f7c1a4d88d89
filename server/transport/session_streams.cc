#include "server/transport/session_streams.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/sessions/session_id.h"
#include "server/transport/convert.h"
#include "server/transport/request_context.h"

namespace linserve {

// ---- Export --------------------------------------------------------------------------------

ExportReactor::ExportReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                             const v1::ExportSessionRequest* request)
    : env_(env) {
  const RequestContext call = RequestContext::ForGrpc(env_.auth(), *context);
  grpc::Status rejected = ToGrpcStatus(call.auth_status());
  absl::StatusOr<SessionId> id = absl::UnknownError("unreachable");
  if (rejected.ok()) {
    tenant_ = call.tenant();
    id = ParseSessionId(request->session_id(), "session_id");
    if (!id.ok()) rejected = ToGrpcStatus(id.status());
  }
  if (!rejected.ok()) {
    FinishOnce(rejected);
    return;
  }
  env_.engine().ExportSession(tenant_, *id, [this](absl::StatusOr<std::string> snapshot) {
    Exported(std::move(snapshot));
  });
}

void ExportReactor::Exported(absl::StatusOr<std::string> snapshot) {
  grpc::Status finish_with;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    replied_ = true;
    if (!snapshot.ok()) {
      finish_with = ToGrpcStatus(snapshot.status());
    } else {
      snapshot_ = *std::move(snapshot);
      write = NextLocked(&finish_with);
    }
  }
  if (write) {
    StartWrite(&chunk_);
  } else {
    FinishOnce(finish_with);
  }
}

bool ExportReactor::NextLocked(grpc::Status* finish_with) {
  if (cancelled_) {
    *finish_with = grpc::Status::CANCELLED;
    return false;
  }
  if (offset_ >= snapshot_.size()) {
    *finish_with = grpc::Status::OK;
    return false;
  }
  const size_t n = std::min<size_t>(env_.export_chunk_bytes(), snapshot_.size() - offset_);
  chunk_.set_data(snapshot_.substr(offset_, n));
  offset_ += n;
  writing_ = true;
  return true;
}

void ExportReactor::OnWriteDone(bool ok) {
  grpc::Status finish_with;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
    write = NextLocked(&finish_with);
  }
  if (write) {
    StartWrite(&chunk_);
  } else {
    FinishOnce(finish_with);
  }
}

void ExportReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    // Before the engine replies the callback still needs this reactor; during a write,
    // OnWriteDone follows. Either finishes.
    if (!replied_ || writing_) return;
  }
  FinishOnce(grpc::Status::CANCELLED);
}

void ExportReactor::FinishOnce(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    final_status_ = status;
  }
  Finish(status);
}

void ExportReactor::OnDone() {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    status = final_status_;
  }
  env_.RecordRpc("ExportSession", tenant_, status);
  delete this;
}

// ---- Import --------------------------------------------------------------------------------

ImportReactor::ImportReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                             v1::Session* response)
    : env_(env),
      context_(context),
      response_(response),
      max_bytes_(env.engine().max_snapshot_bytes()) {
  const RequestContext call = RequestContext::ForGrpc(env_.auth(), *context);
  if (!call.authenticated()) {
    FinishWith(ToGrpcStatus(call.auth_status()));
    return;
  }
  tenant_ = call.tenant();
  StartRead(&chunk_);
}

void ImportReactor::OnReadDone(bool ok) {
  if (ok) {
    if (!chunk_.session_id().empty()) {
      if (!first_chunk_) {
        FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "session_id: only the first chunk may propose an id"));
        return;
      }
      absl::StatusOr<SessionId> id = ParseSessionId(chunk_.session_id(), "session_id");
      if (!id.ok()) {
        FinishWith(ToGrpcStatus(id.status()));
        return;
      }
      proposed_ = *std::move(id);
    }
    first_chunk_ = false;
    if (static_cast<int64_t>(snapshot_.size() + chunk_.data().size()) > max_bytes_) {
      FinishWith(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("data: the snapshot exceeds ", max_bytes_,
                       " bytes, the most a session of this model can take")));
      return;
    }
    snapshot_.append(chunk_.data());
    StartRead(&chunk_);
    return;
  }
  if (context_->IsCancelled()) {
    FinishWith(grpc::Status::CANCELLED);
    return;
  }
  if (snapshot_.empty()) {
    FinishWith(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "data: no snapshot bytes were sent"));
    return;
  }
  env_.engine().ImportSession(
      tenant_, snapshot_,
      [this](absl::StatusOr<SessionInfo> info) {
        if (info.ok()) ToProto(*info, response_);
        FinishWith(ToGrpcStatus(info.status()));
      },
      std::move(proposed_));
}

void ImportReactor::FinishWith(const grpc::Status& status) {
  final_status_ = status;
  Finish(status);
}

void ImportReactor::OnDone() {
  env_.RecordRpc("ImportSession", tenant_, final_status_);
  delete this;
}

}  // namespace linserve
