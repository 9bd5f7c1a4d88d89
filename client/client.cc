#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_callback.h"
#include "openssl/rand.h"

namespace linserve {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

namespace {

absl::Status CancelledByClient() {
  return absl::CancelledError("the client cancelled its calls (Client::CancelAll)");
}

// A session id for CreateSession / ImportSession to propose: 128 bits from OpenSSL's CSPRNG as
// 32 lowercase hex digits, the server's own format (ids are capabilities: unguessable).
absl::StatusOr<std::string> NewSessionId() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    return absl::InternalError("RAND_bytes failed: the system random source is unavailable");
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(raw), 16));
}

// gRPC's retry policy for ClientOptions::retry_unavailable. gRPC retries only calls that have
// received no response yet, and caps maxAttempts at 5.
constexpr char kRetryUnavailableConfig[] = R"({"methodConfig": [{
  "name": [{"service": "linserve.v1.LinServe"}],
  "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.5s", "maxBackoff": "4s",
                  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})";

}  // namespace

// ---- Client --------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("target: must not be empty");
  if (!options.tls && (!options.tls_root_certs.empty() || !options.tls_server_name.empty() ||
                       !options.tls_client_cert_chain.empty() ||
                       !options.tls_client_key.empty())) {
    return absl::InvalidArgumentError(
        "tls_root_certs / tls_server_name / tls_client_cert_chain / tls_client_key: only "
        "meaningful with tls = true");
  }
  if (options.tls_client_cert_chain.empty() != options.tls_client_key.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_cert_chain and tls_client_key: give both (mutual TLS) or neither");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout: must be > 0, got ", absl::FormatDuration(options.timeout)));
  }
  grpc::ChannelArguments args;
  if (options.retry_unavailable) args.SetServiceConfigJSON(kRetryUnavailableConfig);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    ssl.pem_cert_chain = options.tls_client_cert_chain;
    ssl.pem_private_key = options.tls_client_key;
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.target, credentials, args);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::LinServe::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

bool Client::Prepare(grpc::ClientContext& context, const CallOptions& options, bool health,
                     absl::string_view session_id) {
  const absl::Duration timeout = options.timeout.value_or(options_.timeout);
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMicroseconds(timeout));
  }
  if (!health && !options_.auth_token.empty()) {
    context.AddMetadata("authorization", "Bearer " + options_.auth_token);
  }
  if (!options.request_id.empty()) context.AddMetadata("x-request-id", options.request_id);
  if (!session_id.empty()) context.AddMetadata(kSessionHeader, std::string(session_id));
  absl::MutexLock lock(&mu_);
  if (cancelled_all_) return false;
  live_.insert(&context);
  return true;
}

void Client::Untrack(grpc::ClientContext& context) {
  absl::MutexLock lock(&mu_);
  live_.erase(&context);
}

void Client::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_all_ = true;
  for (grpc::ClientContext* context : live_) context->TryCancel();
}

absl::Status Client::Generate(const v1::GenerateRequest& request, MessageCallback on_message,
                              const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, request.session_id())) {
    return CancelledByClient();
  }
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  v1::GenerateResponse response;
  bool stopped = false;
  while (reader->Read(&response)) {
    if (!on_message(response)) {
      stopped = true;
      context.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  Untrack(context);
  if (stopped) return absl::CancelledError("the message callback cancelled the call");
  return FromGrpcStatus(status);
}

absl::StatusOr<v1::GetModelInfoResponse> Client::GetModelInfo(const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::GetModelInfoResponse response;
  const grpc::Status status = stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(absl::string_view text,
                                                      const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::TokenizeRequest request;
  request.set_text(std::string(text));
  v1::TokenizeResponse response;
  const grpc::Status status = stub_->Tokenize(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end());
}

absl::StatusOr<std::string> Client::Detokenize(absl::Span<const int32_t> token_ids,
                                               const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Assign(token_ids.begin(), token_ids.end());
  v1::DetokenizeResponse response;
  const grpc::Status status = stub_->Detokenize(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::move(*response.mutable_text());
}

absl::StatusOr<v1::Session> Client::CreateSession(const CallOptions& options) {
  absl::StatusOr<std::string> id = NewSessionId();
  if (!id.ok()) return id.status();
  v1::CreateSessionRequest request;
  request.set_session_id(*id);
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, *id)) return CancelledByClient();
  v1::Session response;
  const grpc::Status status = stub_->CreateSession(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::Session> Client::GetSession(absl::string_view session_id,
                                               const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, session_id)) return CancelledByClient();
  v1::GetSessionRequest request;
  request.set_session_id(std::string(session_id));
  v1::Session response;
  const grpc::Status status = stub_->GetSession(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::ListSessionsResponse> Client::ListSessions(int32_t page_size,
                                                              absl::string_view page_token,
                                                              const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::ListSessionsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(std::string(page_token));
  v1::ListSessionsResponse response;
  const grpc::Status status = stub_->ListSessions(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::Session> Client::ForkSession(absl::string_view session_id,
                                                const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, session_id)) return CancelledByClient();
  v1::ForkSessionRequest request;
  request.set_session_id(std::string(session_id));
  v1::Session response;
  const grpc::Status status = stub_->ForkSession(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::Session> Client::ForkSessionAt(absl::string_view session_id, int64_t num_tokens,
                                                  const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::ForkSessionRequest request;
  request.set_session_id(std::string(session_id));
  request.set_num_tokens(num_tokens);
  v1::Session response;
  const grpc::Status status = stub_->ForkSession(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::Session> Client::RewindSession(absl::string_view session_id, int64_t num_tokens,
                                                  const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options)) return CancelledByClient();
  v1::RewindSessionRequest request;
  request.set_session_id(std::string(session_id));
  request.set_num_tokens(num_tokens);
  v1::Session response;
  const grpc::Status status = stub_->RewindSession(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status Client::DeleteSession(absl::string_view session_id, const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, session_id)) return CancelledByClient();
  v1::DeleteSessionRequest request;
  request.set_session_id(std::string(session_id));
  v1::DeleteSessionResponse response;
  const grpc::Status status = stub_->DeleteSession(&context, request, &response);
  Untrack(context);
  return FromGrpcStatus(status);
}

absl::StatusOr<std::string> Client::ExportSession(absl::string_view session_id,
                                                  const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, session_id)) return CancelledByClient();
  v1::ExportSessionRequest request;
  request.set_session_id(std::string(session_id));
  std::unique_ptr<grpc::ClientReader<v1::ExportSessionChunk>> reader =
      stub_->ExportSession(&context, request);
  std::string snapshot;
  v1::ExportSessionChunk chunk;
  while (reader->Read(&chunk)) snapshot.append(chunk.data());
  const grpc::Status status = reader->Finish();
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return snapshot;
}

absl::StatusOr<v1::Session> Client::ImportSession(absl::string_view snapshot,
                                                  const CallOptions& options,
                                                  int32_t chunk_bytes) {
  if (chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes: must be >= 1, got ", chunk_bytes));
  }
  absl::StatusOr<std::string> id = NewSessionId();
  if (!id.ok()) return id.status();
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/false, *id)) return CancelledByClient();
  v1::Session response;
  std::unique_ptr<grpc::ClientWriter<v1::ImportSessionChunk>> writer =
      stub_->ImportSession(&context, &response);
  v1::ImportSessionChunk chunk;
  chunk.set_session_id(*id);
  for (size_t offset = 0; offset < snapshot.size(); offset += chunk_bytes) {
    chunk.set_data(std::string(snapshot.substr(offset, chunk_bytes)));
    if (!writer->Write(chunk)) break;  // the server ended the call; Finish says why
    chunk.clear_session_id();
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Client::CheckHealth(
    const std::string& service, const CallOptions& options) {
  grpc::ClientContext context;
  if (!Prepare(context, options, /*health=*/true)) return CancelledByClient();
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health_->Check(&context, request, &response);
  Untrack(context);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.status();
}

// ---- GenerateStream ------------------------------------------------------------------------

struct GenerateStream::State {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
};

class GenerateStream::Reactor : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Reactor(Client& client, const v1::GenerateRequest& request,
          Client::AsyncMessageCallback on_message, std::shared_ptr<State> state)
      : client_(client),
        request_(request),
        on_message_(std::move(on_message)),
        state_(std::move(state)) {}

  grpc::ClientContext& context() { return context_; }

  void Start() {
    client_.stub_->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    on_message_(response_);
    StartRead(&response_);
  }

  // The last use of the reactor by gRPC and by itself: the stream may delete it once `done`.
  void OnDone(const grpc::Status& status) override {
    client_.Untrack(context_);
    absl::MutexLock lock(&state_->mu);
    state_->status = FromGrpcStatus(status);
    state_->done = true;
  }

 private:
  Client& client_;
  grpc::ClientContext context_;
  const v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  const Client::AsyncMessageCallback on_message_;
  const std::shared_ptr<State> state_;
};

std::unique_ptr<GenerateStream> Client::StartGenerate(const v1::GenerateRequest& request,
                                                      AsyncMessageCallback on_message,
                                                      const CallOptions& options) {
  auto state = std::make_shared<GenerateStream::State>();
  auto reactor =
      std::make_unique<GenerateStream::Reactor>(*this, request, std::move(on_message), state);
  if (!Prepare(reactor->context(), options, /*health=*/false, request.session_id())) {
    absl::MutexLock lock(&state->mu);
    state->done = true;
    state->status = CancelledByClient();
    return std::unique_ptr<GenerateStream>(new GenerateStream(std::move(state), nullptr));
  }
  GenerateStream::Reactor* started = reactor.get();
  auto stream =
      std::unique_ptr<GenerateStream>(new GenerateStream(std::move(state), std::move(reactor)));
  started->Start();
  return stream;
}

GenerateStream::GenerateStream(std::shared_ptr<State> state, std::unique_ptr<Reactor> reactor)
    : state_(std::move(state)), reactor_(std::move(reactor)) {}

GenerateStream::~GenerateStream() {
  Cancel();
  Wait().IgnoreError();
}

void GenerateStream::Cancel() {
  if (reactor_ != nullptr) reactor_->context().TryCancel();
}

absl::Status GenerateStream::Wait() {
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(&state_->done));
  return state_->status;
}

bool GenerateStream::done() const {
  absl::MutexLock lock(&state_->mu);
  return state_->done;
}

}  // namespace linserve
