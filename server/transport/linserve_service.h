// LinServeService: the linserve.v1.LinServe gRPC service over an Engine, on gRPC's callback
// API. No handler blocks: each parses its request, hands the engine one operation and finishes
// from the engine's callback (Tokenize, Detokenize and GetModelInfo need no engine thread).
#ifndef LINSERVE_SERVER_TRANSPORT_LINSERVE_SERVICE_H_
#define LINSERVE_SERVER_TRANSPORT_LINSERVE_SERVICE_H_

#include "linserve/v1/service.grpc.pb.h"
#include "server/transport/service_env.h"

namespace linserve {

class LinServeService final : public v1::LinServe::CallbackService {
 public:
  // `env` must outlive the service.
  explicit LinServeService(const ServiceEnv& env) : env_(env) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::Session* response) override;
  grpc::ServerUnaryReactor* RewindSession(grpc::CallbackServerContext* context,
                                          const v1::RewindSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;
  grpc::ServerWriteReactor<v1::ExportSessionChunk>* ExportSession(
      grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) override;
  grpc::ServerReadReactor<v1::ImportSessionChunk>* ImportSession(
      grpc::CallbackServerContext* context, v1::Session* response) override;

 private:
  const ServiceEnv& env_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_LINSERVE_SERVICE_H_
