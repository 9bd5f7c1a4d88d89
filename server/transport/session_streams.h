// The streaming session RPCs: ExportSession writes a snapshot in chunks, ImportSession reads
// one. Both hand the engine a single operation and finish only after its callback, so the
// callback always finds the reactor alive (OnDone, which deletes, follows Finish).
#ifndef LINSERVE_SERVER_TRANSPORT_SESSION_STREAMS_H_
#define LINSERVE_SERVER_TRANSPORT_SESSION_STREAMS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "linserve/v1/session.pb.h"
#include "server/sessions/session_id.h"
#include "server/transport/service_env.h"

namespace linserve {

class ExportReactor : public grpc::ServerWriteReactor<v1::ExportSessionChunk> {
 public:
  ExportReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                const v1::ExportSessionRequest* request);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // The engine's answer.
  void Exported(absl::StatusOr<std::string> snapshot);
  // Under mu_: starts the next chunk's write or finishes; the caller runs the returned action
  // outside the lock.
  bool NextLocked(grpc::Status* finish_with) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOnce(const grpc::Status& status);

  const ServiceEnv& env_;
  // The caller's principal once authenticated ("" before or without); set by the constructor
  // before anything can call back, read-only afterwards.
  std::string tenant_;
  absl::Mutex mu_;
  bool replied_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::string snapshot_ ABSL_GUARDED_BY(mu_);
  size_t offset_ ABSL_GUARDED_BY(mu_) = 0;
  v1::ExportSessionChunk chunk_ ABSL_GUARDED_BY(mu_);
};

class ImportReactor : public grpc::ServerReadReactor<v1::ImportSessionChunk> {
 public:
  ImportReactor(const ServiceEnv& env, grpc::CallbackServerContext* context,
                v1::Session* response);
  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  void FinishWith(const grpc::Status& status);

  const ServiceEnv& env_;
  grpc::CallbackServerContext* const context_;
  v1::Session* const response_;
  const int64_t max_bytes_;
  // As ExportReactor::tenant_.
  std::string tenant_;
  // Reads are sequential: one OnReadDone at a time touches these.
  v1::ImportSessionChunk chunk_;
  std::string snapshot_;
  // The first chunk's session_id, parsed; nullopt when it proposed none.
  std::optional<SessionId> proposed_;
  bool first_chunk_ = true;
  grpc::Status final_status_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_SESSION_STREAMS_H_
