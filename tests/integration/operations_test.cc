// The operator- and client-facing surface through the real stack: request validation, model
// info, tokenization, health, reflection, bearer-token auth, TLS, metrics and probes.
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "linserve/v1/service.grpc.pb.h"
#include "test_server.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using ServingStatus = grpc::health::v1::HealthCheckResponse;

std::string ReadTestData(const std::string& name) {
  std::ifstream in(std::string(LINSERVE_SOURCE_DIR) + "/tests/integration/testdata/" + name);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class OperationsTest : public ::testing::Test {
 protected:
  static TestServerOptions Options() {
    TestServerOptions o;
    o.backend.num_threads = 1;
    o.backend.max_slots = 8;
    return o;
  }
  Model model_ = MakeRandomModel(TinyConfig(), 3);
};

TEST_F(OperationsTest, EveryInvalidFieldIsInvalidArgumentNamingTheFieldAndLimit) {
  TestServer server(model_, Options());
  const std::string session = server.client().CreateSession()->id();
  struct Case {
    std::string field;
    std::string limit;
    std::function<void(v1::GenerateRequest&)> mutate;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::string> many(17, "s");
  const std::vector<std::string> blank = {"a", std::string()};
  const std::vector<Case> cases = {
      {"prompt", "required", [](auto& r) { r.clear_prompt(); }},
      {"prompt.text", "empty", [](auto& r) { r.set_text(""); }},
      {"prompt", "empty", [](auto& r) { r.mutable_token_ids()->clear_ids(); }},
      {"prompt.token_ids[1]", "[0, 260)", [](auto& r) { r.mutable_token_ids()->set_ids(1, 260); }},
      {"prompt.token_ids[0]", "[0, 260)", [](auto& r) { r.mutable_token_ids()->set_ids(0, -5); }},
      {"max_new_tokens", "[0, 4096]", [](auto& r) { r.set_max_new_tokens(-2); }},
      {"max_new_tokens", "[0, 4096]", [](auto& r) { r.set_max_new_tokens(4097); }},
      {"prompt_logprobs", "[0, 20]", [](auto& r) { r.set_prompt_logprobs(21); }},
      {"sampling.temperature", ">= 0",
       [](auto& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"sampling.temperature", ">= 0",
       [&](auto& r) { r.mutable_sampling()->set_temperature(nan); }},
      {"sampling.top_p", "(0, 1]", [](auto& r) { r.mutable_sampling()->set_top_p(0); }},
      {"sampling.top_p", "(0, 1]", [](auto& r) { r.mutable_sampling()->set_top_p(1.01f); }},
      {"sampling.top_k", ">= 0", [](auto& r) { r.mutable_sampling()->set_top_k(-1); }},
      {"sampling.min_p", "[0, 1]", [](auto& r) { r.mutable_sampling()->set_min_p(-0.1f); }},
      {"sampling.repetition_penalty", "> 0",
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(0); }},
      {"sampling.presence_penalty", "[-2, 2]",
       [](auto& r) { r.mutable_sampling()->set_presence_penalty(2.5f); }},
      {"sampling.frequency_penalty", "[-2, 2]",
       [](auto& r) { r.mutable_sampling()->set_frequency_penalty(-9); }},
      {"stop", "16", [&](auto& r) { r.mutable_stop()->Assign(many.begin(), many.end()); }},
      {"stop[0]", "256", [](auto& r) { r.add_stop(std::string(257, 'x')); }},
      {"stop[1]", "empty", [&](auto& r) { r.mutable_stop()->Assign(blank.begin(), blank.end()); }},
      {"stop_token_ids", "64", [](auto& r) { for (int i = 0; i < 65; ++i) r.add_stop_token_ids(1); }},
      {"stop_token_ids[0]", "[0, 260)", [](auto& r) { r.add_stop_token_ids(999); }},
      {"top_logprobs", "[0, 20]", [](auto& r) { r.set_top_logprobs(21); }},
      {"top_logprobs", "[0, 20]", [](auto& r) { r.set_top_logprobs(-1); }},
      {"session_id", "32 lowercase hex", [](auto& r) { r.set_session_id("not-a-session"); }},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest request = TokensRequest({1, 2, 3}, 8, 0);
    c.mutate(request);
    const Streamed out = RunGenerate(server.client(), request);
    EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(out.status.message()), HasSubstr(c.field + ":")) << out.status;
    EXPECT_THAT(std::string(out.status.message()), HasSubstr(c.limit)) << out.status;
    EXPECT_EQ(out.messages, 0);
  }
  // Other RPCs validate their fields the same way.
  EXPECT_THAT(std::string(server.client().GetSession("XYZ").status().message()),
              HasSubstr("session_id:"));
  EXPECT_THAT(std::string(server.client().ListSessions(-1, "").status().message()),
              HasSubstr("page_size:"));
  EXPECT_THAT(std::string(server.client().ListSessions(10, "bogus").status().message()),
              HasSubstr("page_token:"));
  const absl::Status detok = server.client().Detokenize({1, 300}).status();
  EXPECT_EQ(detok.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(detok.message()), HasSubstr("token_ids:"));
  // Detokenize takes at most max_prompt_tokens ids.
  const absl::Status too_many =
      server.client()
          .Detokenize(std::vector<int32_t>(EngineOptions().requests.max_prompt_tokens + 1, 1))
          .status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument) << too_many;
  EXPECT_THAT(std::string(too_many.message()),
              HasSubstr("token_ids: 65537 ids exceed the limit of 65536 (max_prompt_tokens)"));
  // Unknown sessions are NOT_FOUND everywhere.
  const std::string unknown(32, 'f');
  EXPECT_EQ(RunGenerate(server.client(), TokensRequest({1}, 2, 0, unknown)).status.code(),
            absl::StatusCode::kNotFound);
  for (const absl::Status& s :
       {server.client().GetSession(unknown).status(), server.client().ForkSession(unknown).status(),
        server.client().DeleteSession(unknown), server.client().ExportSession(unknown).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  }
  EXPECT_TRUE(server.client().GetSession(session).ok());
}

TEST_F(OperationsTest, ModelInfoTokenizeAndDetokenize) {
  TestServer server(model_, Options());
  absl::StatusOr<v1::GetModelInfoResponse> info = server.client().GetModelInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->model().architecture(), "linear_transformer");
  EXPECT_EQ(info->model().vocab_size(), 260);
  EXPECT_EQ(info->model().n_layers(), 2);
  EXPECT_EQ(info->model().feature_map(), "elu_plus_one");
  EXPECT_EQ(info->model().tokenizer(), "byte");
  EXPECT_EQ(info->model().eos_token_id(), 257);
  EXPECT_EQ(info->model().fingerprint(), model_.fingerprint);
  EXPECT_EQ(info->model().parameter_count(), model_.weights.ParameterCount());
  EXPECT_EQ(info->device(), "cpu");
  EXPECT_EQ(info->state_bytes_per_session(), TinyConfig().StateFloatsPerSlot() * 4);
  EXPECT_EQ(info->model().n_heads(), 4);
  ASSERT_EQ(info->model().layers_size(), 2);
  EXPECT_EQ(info->model().layers(1).mixer().kind(), "linear_attention");
  EXPECT_EQ(info->model().layers(0).state_bytes() + info->model().layers(1).state_bytes(),
            info->state_bytes_per_session());
  EXPECT_EQ(info->model().final_norm().kind(), "layer_norm");
  EXPECT_EQ(info->slot_capacity(), 8);
  EXPECT_EQ(info->limits().max_new_tokens(), 4096);
  EXPECT_EQ(info->limits().max_prompt_bytes(), RequestLimits().max_prompt_bytes);
  EXPECT_EQ(info->load().free_slots(), 8);

  absl::StatusOr<std::vector<int32_t>> ids = server.client().Tokenize("héllo");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 6u);  // bytes
  EXPECT_EQ(*server.client().Detokenize(*ids), "héllo");
}

// A model whose layers differ (the second has 2 heads of 16 instead of 4 of 8): the
// single-block fields are 0, the layer list describes it and the state is the sum of its slices.
TEST_F(OperationsTest, ModelInfoOfAModelWhoseLayersDiffer) {
  ModelConfig mixed = TinyConfig();
  mixed.layers = mixed.LayerList();
  mixed.layers[1].mixer.params.Set("n_heads", int64_t{2});
  mixed.layers[1].mixer.params.Set("head_dim", int64_t{16});
  mixed.layers[1].mixer.params.Set("feature_dim", int64_t{16});
  mixed.final_norm = mixed.layers.back().norm;
  absl::StatusOr<ModelConfig> config = ParseModelConfig(ModelConfigToJson(mixed), "mixed");
  ASSERT_TRUE(config.ok()) << config.status();
  const Model model = MakeRandomModel(*config, 4);
  TestServer server(model, Options());
  absl::StatusOr<v1::GetModelInfoResponse> info = server.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const v1::ModelInfo& m = info->model();
  EXPECT_EQ(m.n_layers(), 2);
  EXPECT_EQ(m.n_heads(), 0);
  EXPECT_EQ(m.head_dim(), 0);
  EXPECT_EQ(m.feature_map(), "");
  ASSERT_EQ(m.layers_size(), 2);
  ASSERT_GE(m.layers(1).mixer().params_size(), 2);
  EXPECT_EQ(m.layers(0).mixer().params(0).value(), "4");
  EXPECT_EQ(m.layers(1).mixer().params(0).name(), "n_heads");
  EXPECT_EQ(m.layers(1).mixer().params(0).value(), "2");
  EXPECT_EQ(m.layers(1).mixer().params(1).value(), "16");
  EXPECT_EQ(m.layers(0).state_bytes(), 4 * 8 * 9 * 4);
  EXPECT_EQ(m.layers(1).state_bytes(), 2 * 16 * 17 * 4);
  EXPECT_EQ(info->state_bytes_per_session(), (4 * 8 * 9 + 2 * 16 * 17) * 4);
  EXPECT_EQ(m.parameter_count(), model.weights.ParameterCount());
}

// Sends `request_bytes` as the one request message of `method` and returns the first response
// message's bytes ("" when none came), or the call's status when it failed.
absl::StatusOr<std::string> RawCall(int port, const std::string& method,
                                    const std::string& request_bytes) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  void* tag = nullptr;
  bool ok = false;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  std::string bytes;
  if (ok) {
    std::vector<grpc::Slice> slices;
    if (response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return FromGrpcStatus(status);
  return bytes;
}

// grpc.reflection.v1alpha's list_services through a generic call with a hand-encoded message.
// Returns the raw ServerReflectionResponse bytes.
absl::StatusOr<std::string> ListServicesByReflection(int port) {
  // ServerReflectionRequest { list_services: "" } = field 7, length-delimited, empty.
  return RawCall(port, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 std::string("\x3a\x00", 2));
}

TEST_F(OperationsTest, HealthAndReflection) {
  TestServer server(model_, Options());
  EXPECT_EQ(*server.client().CheckHealth(), ServingStatus::SERVING);
  EXPECT_EQ(*server.client().CheckHealth("linserve.v1.LinServe"), ServingStatus::SERVING);
  EXPECT_EQ(server.client().CheckHealth("no.such.Service").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::string> services = ListServicesByReflection(server.port());
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_THAT(*services, HasSubstr("linserve.v1.LinServe"));
  server.grpc().SetServing(false);
  EXPECT_EQ(*server.client().CheckHealth(), ServingStatus::NOT_SERVING);
  EXPECT_EQ(*server.client().CheckHealth("linserve.v1.LinServe"), ServingStatus::NOT_SERVING);

  TestServerOptions no_reflection = Options();
  no_reflection.grpc.reflection = false;
  TestServer quiet(model_, no_reflection);
  EXPECT_EQ(ListServicesByReflection(quiet.port()).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(OperationsTest, BearerTokenGuardsEveryCallButHealth) {
  TestServerOptions options = Options();
  options.auth.auth_token = "s3cret";
  options.client.auth_token = "s3cret";
  TestServer server(model_, options);
  EXPECT_TRUE(server.client().GetModelInfo().ok());
  const std::string id = server.client().CreateSession()->id();
  EXPECT_TRUE(RunGenerate(server.client(), TokensRequest({1}, 3, 0, id)).status.ok());

  for (const std::string& token : {std::string(), std::string("wrong"), std::string("s3cre")}) {
    ClientOptions client_options;
    client_options.auth_token = token;
    std::unique_ptr<Client> client = server.NewClient(client_options);
    EXPECT_EQ(client->GetModelInfo().status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(RunGenerate(*client, TokensRequest({1}, 3, 0)).status.code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->CreateSession().status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->ExportSession(id).status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->ImportSession("x").status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client->Tokenize("a").status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(*client->CheckHealth(), ServingStatus::SERVING);
  }
}

// A request that is not a valid protobuf — garbage bytes, a truncated field, or invalid UTF-8 in
// a string field (proto3 strings must be UTF-8) — never reaches a handler: gRPC C++'s callback
// API finishes such a call itself with UNIMPLEMENTED and no message (documented in
// docs/server.md, "Errors"). It costs nothing, and the server goes on serving.
TEST_F(OperationsTest, MalformedRequestBytesAreRefusedBeforeAnyHandler) {
  TestServer server(model_, Options());
  const std::string truncated_text("\x0a\x05" "ab", 4);  // text: 5 bytes announced, 2 sent
  const std::string bad_utf8_text("\x0a\x02\xc3\x28", 4);  // text: "\xc3(" is not UTF-8
  const std::string bad_tag("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
  for (const std::string& method :
       {std::string("/linserve.v1.LinServe/Generate"), std::string("/linserve.v1.LinServe/Tokenize"),
        std::string("/linserve.v1.LinServe/GetSession")}) {
    for (const std::string& bytes : {truncated_text, bad_utf8_text, bad_tag}) {
      EXPECT_EQ(RawCall(server.port(), method, bytes).status().code(),
                absl::StatusCode::kUnimplemented)
          << method;
    }
  }
  EXPECT_TRUE(RunGenerate(server.client(), TokensRequest({1, 2}, 4, 0)).status.ok());
  EXPECT_TRUE(server.client().Tokenize("ab").ok());
}

// The scheme of "authorization" is case-insensitive (RFC 7235 §2.1) and may be followed by more
// than one space; anything else, or the right token under another scheme, is refused.
TEST_F(OperationsTest, BearerSchemeMatchesInAnyLetterCase) {
  TestServerOptions options = Options();
  options.auth.auth_token = "s3cret";
  TestServer server(model_, options);
  std::unique_ptr<v1::LinServe::Stub> stub = v1::LinServe::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& authorization) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", authorization);
    v1::GetModelInfoResponse response;
    return stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &response).error_code();
  };
  for (const char* accepted : {"Bearer s3cret", "bearer s3cret", "BEARER s3cret",
                               "bEaReR s3cret", "Bearer   s3cret"}) {
    EXPECT_EQ(call(accepted), grpc::StatusCode::OK) << accepted;
  }
  for (const char* refused : {"Bearers3cret", "Basic s3cret", "Bearer s3cret ", "Bearer S3CRET",
                              "s3cret", "Bearer ", "Bearer"}) {
    EXPECT_EQ(call(refused), grpc::StatusCode::UNAUTHENTICATED) << refused;
  }
}

TEST_F(OperationsTest, ServesTls) {
  const std::string dir = std::string(LINSERVE_SOURCE_DIR) + "/tests/integration/testdata/";
  TestServerOptions options = Options();
  options.grpc.tls_cert_file = dir + "server.crt";
  options.grpc.tls_key_file = dir + "server.key";
  options.client.tls = true;
  options.client.tls_root_certs = ReadTestData("ca.crt");
  TestServer server(model_, options);
  EXPECT_TRUE(server.client().GetModelInfo().ok());
  EXPECT_TRUE(RunGenerate(server.client(), TokensRequest({1, 2}, 4, 0)).status.ok());

  ClientOptions plaintext;
  plaintext.timeout = absl::Seconds(3);
  EXPECT_FALSE(server.NewClient(plaintext)->GetModelInfo().ok());
  ClientOptions untrusted;  // TLS, but the system roots do not know the test CA
  untrusted.tls = true;
  untrusted.timeout = absl::Seconds(3);
  EXPECT_EQ(server.NewClient(untrusted)->GetModelInfo().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(OperationsTest, MutualTlsRequiresAClientCertificateFromTheConfiguredCa) {
  const std::string dir = std::string(LINSERVE_SOURCE_DIR) + "/tests/integration/testdata/";
  TestServerOptions options = Options();
  options.grpc.tls_cert_file = dir + "server.crt";
  options.grpc.tls_key_file = dir + "server.key";
  options.grpc.tls_client_ca_file = dir + "ca.crt";
  options.client.tls = true;
  options.client.tls_root_certs = ReadTestData("ca.crt");
  options.client.tls_client_cert_chain = ReadTestData("client.crt");
  options.client.tls_client_key = ReadTestData("client.key");
  TestServer server(model_, options);
  EXPECT_TRUE(server.client().GetModelInfo().ok());
  EXPECT_TRUE(RunGenerate(server.client(), TokensRequest({1, 2}, 4, 0)).status.ok());

  ClientOptions anonymous;  // trusts the server, but shows no certificate
  anonymous.tls = true;
  anonymous.tls_root_certs = ReadTestData("ca.crt");
  anonymous.timeout = absl::Seconds(3);
  EXPECT_EQ(server.NewClient(anonymous)->GetModelInfo().status().code(),
            absl::StatusCode::kUnavailable);
  ClientOptions wrong_ca = anonymous;  // a certificate the CA did not sign
  wrong_ca.tls_client_cert_chain = ReadTestData("stranger.crt");
  wrong_ca.tls_client_key = ReadTestData("stranger.key");
  EXPECT_EQ(server.NewClient(wrong_ca)->GetModelInfo().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(OperationsTest, BadTlsOrAddressOptionsFailToStart) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(model_, {});
  ASSERT_TRUE(backend.ok());
  MetricsRegistry metrics;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model_, *std::move(backend), {}, metrics);
  ASSERT_TRUE(engine.ok());
  const Authenticator auth({}, /*certificate_principals=*/false);
  GrpcServerOptions half;
  half.address = "127.0.0.1:0";
  half.tls_cert_file = "/nonexistent.crt";
  EXPECT_THAT(std::string(GrpcServer::Start(**engine, auth, metrics, half).status().message()),
              HasSubstr("tls_cert and tls_key"));
  GrpcServerOptions missing = half;
  missing.tls_key_file = "/nonexistent.key";
  EXPECT_THAT(std::string(GrpcServer::Start(**engine, auth, metrics, missing).status().message()),
              HasSubstr("tls_cert: cannot read"));
  GrpcServerOptions client_ca_without_tls;
  client_ca_without_tls.address = "127.0.0.1:0";
  client_ca_without_tls.tls_client_ca_file = "/some/ca.crt";
  EXPECT_THAT(
      std::string(GrpcServer::Start(**engine, auth, metrics, client_ca_without_tls).status().message()),
      HasSubstr("tls_client_ca"));
  GrpcServerOptions bad_address;
  bad_address.address = "256.1.1.1:99999";
  EXPECT_EQ(GrpcServer::Start(**engine, auth, metrics, bad_address).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(OperationsTest, MetricsAndProbesOverHttp) {
  TestServerOptions options = Options();
  options.http = true;
  TestServer server(model_, options);
  ASSERT_TRUE(RunGenerate(server.client(), TokensRequest({1, 2, 3}, 10, 0)).status.ok());
  EXPECT_EQ(RunGenerate(server.client(), TokensRequest({1}, -1, 0)).status.code(),
            absl::StatusCode::kInvalidArgument);

  httplib::Client http("127.0.0.1", server.http_port());
  // A call is counted when gRPC is done with it, just after the client saw its status.
  std::string text;
  for (int i = 0; i < 500; ++i) {
    httplib::Result metrics = http.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 200);
    text = metrics->body;
    if (text.find("code=\"INVALID_ARGUMENT\"} 1") != std::string::npos &&
        text.find("code=\"OK\"} 1") != std::string::npos) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (const char* expected : {
           "linserve_grpc_requests_total{method=\"Generate\",code=\"OK\"} 1\n",
           "linserve_grpc_requests_total{method=\"Generate\",code=\"INVALID_ARGUMENT\"} 1\n",
           "linserve_generated_tokens_total 10\n",
           "linserve_prompt_tokens_total 3\n",
           "linserve_generations_total{outcome=\"length\"} 1\n",
           "# TYPE linserve_decode_batch_size histogram\n",
           "linserve_decode_batch_size_count 9\n",
           "linserve_prefill_chunk_tokens_count 1\n",
           "linserve_time_to_first_token_seconds_count 1\n",
           "linserve_inter_token_latency_seconds_count 9\n",
           "linserve_queue_depth 0\n",
           "linserve_active_requests 0\n",
           "linserve_free_slots 8\n",
           "linserve_sessions{state=\"resident\"} 0\n",
           "linserve_sessions{state=\"hibernated\"} 0\n",
       }) {
    EXPECT_THAT(text, HasSubstr(expected));
  }
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get("/readyz")->status, 200);
  server.grpc().SetServing(false);
  EXPECT_EQ(http.Get("/readyz")->status, 503);
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get("/nope")->status, 404);
}

}  // namespace
}  // namespace linserve
