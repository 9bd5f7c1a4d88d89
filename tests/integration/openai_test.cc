// The OpenAI-compatible HTTP front end in-process, on a random byte-tokenizer model, so that the
// sanitizer stages run its event loop, its exchanges between the engine thread and the loop, and
// its disconnect handling (the openai_* tests drive the real binary with Node's client, which the
// sanitizers cannot: it serves the SentencePiece model). Wire format, SSE framing, errors, auth,
// sessions, disconnects and many concurrent streams. Not in the TSan stage: with clients and
// server in one process, TSan's file-descriptor tracking reports a socket a client closed and the
// server's uninstrumented libevent reused as a race.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "model/backend/backend.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/engine/engine.h"
#include "server/metrics/metrics.h"
#include "server/transport/auth.h"
#include "server/transport/chat_template.h"
#include "server/transport/openai_server.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kTemplate[] = R"({"message": "{name}: {content}\n", "generation_prompt": "{name}:",
  "names": {"system": "", "user": "A", "assistant": "B"}})";

// The HTTP API's connection limits, where a test sets them.
struct Limits {
  int max_connections = 1024;
  absl::Duration request_deadline = absl::Seconds(30);
};

// Engine, CPU backend and the HTTP API on 127.0.0.1 port 0.
class Api {
 public:
  Api(const Model& model, int32_t max_slots, std::vector<TenantToken> tokens = {},
      Limits limits = {})
      : auth_(tokens, /*certificate_principals=*/false) {
    BackendOptions backend;
    backend.num_threads = 1;
    backend.max_slots = max_slots;
    engine_ = *Engine::Create(model, *CreateCpuBackend(model, backend), EngineOptions{}, metrics_);
    absl::StatusOr<std::unique_ptr<OpenAiServer>> server =
        OpenAiServer::Start(*engine_, auth_, metrics_,
                            {.host = "127.0.0.1",
                             .port = 0,
                             .model_id = "tiny",
                             .chat_template = *ChatTemplate::Parse(kTemplate, "test template"),
                             .max_connections = limits.max_connections,
                             .request_deadline = limits.request_deadline});
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  ~Api() {
    EXPECT_TRUE(engine_->Shutdown(absl::Seconds(10)).ok());
    server_->Stop();
  }

  int port() const { return server_->port(); }
  httplib::Client Client() const {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_read_timeout(30, 0);
    return client;
  }
  httplib::Result Post(const std::string& path, const Json& body,
                       const httplib::Headers& headers = {}) const {
    return Client().Post(path, headers, body.dump(), "application/json");
  }
  std::string Metrics() const { return metrics_.RenderPrometheus(); }
  // Waits up to 10 s for the metrics to contain `line`.
  bool MetricsReach(const std::string& line) const {
    for (int i = 0; i < 1000; ++i) {
      if (absl::StrContains(Metrics(), line)) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

 private:
  MetricsRegistry metrics_;
  Authenticator auth_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<OpenAiServer> server_;
};

Json Completion(int max_tokens, bool stream) {
  return {{"model", "tiny"},    {"prompt", "to be or not"}, {"max_tokens", max_tokens}, {"seed", 7},
          {"temperature", 0.8}, {"ignore_eos", true},       {"stream", stream}};
}

// A model slow enough (about a millisecond a token) that a long stream is still running while a
// test does something else.
Model SlowModel() {
  ModelConfig config = TinyConfig();
  config.d_model = 256;
  config.n_heads = 8;
  config.head_dim = 32;
  config.feature_dim = 32;
  config.d_ff = 1024;
  config.n_layers = 4;
  return MakeRandomModel(config, 5);
}

// A raw TCP connection to the API, for what an HTTP client library would not send.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  int fd() const { return fd_; }
  bool connected() const { return connected_; }
  // False once the server closed or reset the connection.
  bool Send(absl::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(n);
    }
    return true;
  }
  // Whether the connection has something to read (bytes, its end or an error) within `wait`.
  bool Readable(absl::Duration wait) {
    pollfd readable{.fd = fd_, .events = POLLIN, .revents = 0};
    return poll(&readable, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) > 0;
  }
  // What the server sends until it closes the connection (or 30 s pass without a byte).
  std::string ReadToEnd() {
    std::string received;
    char buffer[4096];
    while (Readable(absl::Seconds(30))) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      received.append(buffer, n);
    }
    return received;
  }

 private:
  const int fd_;
  bool connected_ = false;
};

// The events of a server-sent event stream, checked for framing: every event is one
// "data: ..." line followed by a blank line, and the last is [DONE].
std::vector<std::string> Events(const std::string& body) {
  std::vector<std::string> events;
  EXPECT_TRUE(absl::EndsWith(body, "\n\n")) << body;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    EXPECT_FALSE(absl::StrContains(event, "\n")) << event;
    events.emplace_back(event.substr(6));
  }
  EXPECT_FALSE(events.empty());
  if (!events.empty()) {
    EXPECT_EQ(events.back(), "[DONE]");
  }
  return events;
}

// The model's tokenizer, except that encoding a text holding "BLOCK" waits until Release: a
// tokenization as long as the test needs.
class BlockingTokenizer : public Tokenizer {
 public:
  explicit BlockingTokenizer(std::unique_ptr<Tokenizer> inner) : inner_(std::move(inner)) {}
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view text,
                                                    size_t max_tokens) const override {
    if (text.find("BLOCK") != std::string_view::npos) {
      entered_.Notify();
      released_.WaitForNotification();
    }
    return inner_->EncodeAtMost(text, max_tokens);
  }
  std::string TokenBytes(TokenId id) const override { return inner_->TokenBytes(id); }
  void WaitUntilEntered() const { entered_.WaitForNotification(); }
  void Release() const { released_.Notify(); }

 private:
  std::unique_ptr<Tokenizer> inner_;
  mutable absl::Notification entered_;
  mutable absl::Notification released_;
};

class OpenAiTest : public ::testing::Test {
 protected:
  Model model_ = MakeRandomModel(TinyConfig(), 5);
};

TEST_F(OpenAiTest, StreamedCompletionIsTheWholeOneInServerSentEvents) {
  Api api(model_, 4);
  httplib::Result whole = api.Post("/v1/completions", Completion(12, false));
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json reply = Json::parse(whole->body);
  EXPECT_EQ(reply["object"], "text_completion");
  EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(reply["usage"]["completion_tokens"], 12);

  Json request = Completion(12, true);
  request["stream_options"] = {{"include_usage", true}};
  httplib::Result streamed = api.Post("/v1/completions", request);
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_THAT(streamed->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  const std::vector<std::string> events = Events(streamed->body);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    text += chunk["choices"][0]["text"].get<std::string>();
    EXPECT_TRUE(chunk["usage"].is_null());
  }
  EXPECT_EQ(Json::parse(events[events.size() - 3])["choices"][0]["finish_reason"], "length");
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
  EXPECT_EQ(text, reply["choices"][0]["text"].get<std::string>());
}

TEST_F(OpenAiTest, ChatAndModelsAndSessions) {
  Api api(model_, 4);
  httplib::Result models = api.Client().Get("/v1/models");
  ASSERT_TRUE(models);
  const Json model = Json::parse(models->body)["data"][0];
  EXPECT_EQ(model["id"], "tiny");
  // linserve's extensions: the layer list and the state per session.
  EXPECT_EQ(model["state_bytes_per_session"], TinyConfig().StateFloatsPerSlot() * 4);
  ASSERT_EQ(model["layers"].size(), 2u);
  EXPECT_EQ(model["layers"][0]["mixer"]["kind"], "linear_attention");
  EXPECT_EQ(model["layers"][0]["mixer"]["n_heads"], 4);
  EXPECT_EQ(model["final_norm"]["kind"], "layer_norm");
  httplib::Result one = api.Client().Get("/v1/models/tiny");
  ASSERT_TRUE(one);
  EXPECT_EQ(Json::parse(one->body), model);

  httplib::Result created = api.Post("/v1/sessions", Json::object());
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  const std::string id = Json::parse(created->body)["id"];
  const Json chat = {{"model", "tiny"},  {"max_tokens", 5},
                     {"seed", 1},        {"ignore_eos", true},
                     {"session_id", id}, {"messages", {{{"role", "user"}, {"content", "hello"}}}}};
  int64_t fed = 0;
  for (int turn = 0; turn < 2; ++turn) {
    httplib::Result reply = api.Post("/v1/chat/completions", chat);
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json answer = Json::parse(reply->body);
    EXPECT_EQ(answer["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(answer["usage"]["completion_tokens"], 5);
    fed += answer["usage"]["total_tokens"].get<int64_t>();
  }
  httplib::Result session = api.Client().Get("/v1/sessions/" + id);
  ASSERT_TRUE(session);
  ASSERT_EQ(session->status, 200) << session->body;
  // The session holds both turns: each one's "A: hello\nB:" and its 5 tokens.
  EXPECT_EQ(Json::parse(session->body)["num_tokens"], fed);
  EXPECT_GE(fed, 2 * (11 + 5));
  EXPECT_EQ(api.Client().Delete("/v1/sessions/" + id)->status, 200);
  EXPECT_EQ(api.Client().Get("/v1/sessions/" + id)->status, 404);
}

TEST_F(OpenAiTest, InvalidRequestsGetOpenAiErrorsNamingTheField) {
  Api api(model_, 4);
  struct Case {
    std::string body;
    int status;
    std::string param;
  };
  std::vector<Case> cases = {
      {"{not json", 400, ""},
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 0}}.dump(), 400, "max_tokens"},
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"n", 17}}.dump(), 400, "n"},
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"temperature", -1}}.dump(), 400, "temperature"},
      {Json{{"model", "other"}, {"prompt", "x"}}.dump(), 404, "model"},
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"session_id", "nope"}}.dump(), 400, "session_id"},
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"session_id", std::string(32, 'a')}}.dump(), 404,
       ""},
      // Nested deeper than kMaxJsonDepth (64), wherever it is.
      {absl::StrCat(R"({"model": "tiny", "prompt": "x", "user": )", std::string(65, '['),
                    std::string(65, ']'), "}"),
       400, "body"},
      // A whole answer of 4096 x (1 + 20) logprob entries exceeds kMaxWholeAnswerLogprobs.
      {Json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 4096}, {"logprobs", 20}}.dump(), 400,
       "max_tokens"},
      {Json{{"model", "tiny"},
            {"messages", {{{"role", "user"}, {"content", "x"}}}},
            {"max_completion_tokens", 2048},
            {"logprobs", true},
            {"top_logprobs", 20}}
           .dump(),
       400, "max_completion_tokens"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    httplib::Result reply = api.Client().Post(
        absl::StrContains(c.body, "messages") ? "/v1/chat/completions" : "/v1/completions", c.body,
        "application/json");
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, c.status);
    const Json error = Json::parse(reply->body)["error"];
    EXPECT_FALSE(error["message"].get<std::string>().empty());
    EXPECT_TRUE(error.contains("type"));
    if (!c.param.empty()) {
      EXPECT_EQ(error["param"], c.param);
    }
  }
  httplib::Result deep =
      api.Client().Post("/v1/completions", absl::StrCat(std::string(65, '['), std::string(65, ']')),
                        "application/json");
  ASSERT_TRUE(deep);
  EXPECT_THAT(deep->body, HasSubstr("more than 64 levels deep"));
  httplib::Result whole =
      api.Post("/v1/completions",
               {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 4096}, {"logprobs", 20}});
  ASSERT_TRUE(whole);
  EXPECT_THAT(whole->body, HasSubstr("86016 logprob entries exceed the limit of 32768"));
  // Within the limit, and streamed whatever the size: accepted.
  for (const Json& accepted :
       {Json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 2}, {"logprobs", 20}},
        Json{{"model", "tiny"},
             {"prompt", "x"},
             {"max_tokens", 2},
             {"logprobs", 20},
             {"stream", true},
             {"ignore_eos", true}}}) {
    httplib::Result reply = api.Post("/v1/completions", accepted);
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200) << reply->body;
  }
  EXPECT_EQ(api.Client().Get("/v1/nope")->status, 404);
  EXPECT_EQ(api.Client().Get("/v1/completions")->status, 405);
}

// response_format and guided_* through the whole stack: a random model, so the mask alone makes
// the text valid.
TEST_F(OpenAiTest, StructuredOutputGivesValidJson) {
  Api api(model_, 4);
  const Json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}}},
                       {"required", {"ok"}},
                       {"additionalProperties", false}};
  for (int seed = 0; seed < 5; ++seed) {
    const Json chat = {
        {"model", "tiny"},
        {"max_tokens", 300},
        {"seed", seed},
        {"messages", {{{"role", "user"}, {"content", "ok?"}}}},
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "answer"}, {"strict", true}, {"schema", schema}}}}}};
    httplib::Result reply = api.Post("/v1/chat/completions", chat);
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json answer = Json::parse(reply->body);
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "stop") << reply->body;
    const Json content =
        Json::parse(answer["choices"][0]["message"]["content"].get<std::string>(), nullptr,
                    /*allow_exceptions=*/false);
    ASSERT_TRUE(content.is_object()) << reply->body;
    ASSERT_EQ(content.size(), 1u) << reply->body;
    EXPECT_TRUE(content["ok"].is_boolean()) << reply->body;
  }
  // json_object: whatever the model, the text is a prefix of a JSON object, and a whole one when
  // it stopped.
  int whole = 0;
  for (int seed = 0; seed < 10; ++seed) {
    const Json chat = {{"model", "tiny"},
                       {"max_tokens", 2000},
                       {"seed", seed},
                       {"messages", {{{"role", "user"}, {"content", "json"}}}},
                       {"response_format", {{"type", "json_object"}}}};
    httplib::Result reply = api.Post("/v1/chat/completions", chat);
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json answer = Json::parse(reply->body);
    const std::string text = answer["choices"][0]["message"]["content"];
    ASSERT_TRUE(text.starts_with("{")) << text;
    if (answer["choices"][0]["finish_reason"] != "stop") continue;
    ++whole;
    EXPECT_TRUE(Json::parse(text, nullptr, /*allow_exceptions=*/false).is_object()) << text;
  }
  EXPECT_GT(whole, 0);
  // guided_regex on completions, streamed.
  httplib::Result streamed = api.Post("/v1/completions", {{"model", "tiny"},
                                                          {"prompt", "x"},
                                                          {"max_tokens", 50},
                                                          {"stream", true},
                                                          {"guided_regex", "(yes|no)"}});
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  std::string text;
  for (absl::string_view line : absl::StrSplit(streamed->body, "\n")) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    const Json chunk = Json::parse(line);
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_TRUE(text == "yes" || text == "no") << streamed->body;
  // A schema the compiler refuses: a 400 naming the field; with ignore_eos the engine's refusal.
  Json bad = schema;
  bad["properties"]["ok"]["format"] = "date";
  httplib::Result refused = api.Post(
      "/v1/chat/completions",
      {{"model", "tiny"},
       {"messages", {{{"role", "user"}, {"content", "x"}}}},
       {"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", bad}}}}}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(Json::parse(refused->body)["error"]["param"], "response_format.json_schema.schema")
      << refused->body;
  httplib::Result ignoring = api.Post("/v1/completions", {{"model", "tiny"},
                                                          {"prompt", "x"},
                                                          {"ignore_eos", true},
                                                          {"guided_regex", "a+"}});
  ASSERT_TRUE(ignoring);
  EXPECT_EQ(ignoring->status, 400);
  EXPECT_EQ(Json::parse(ignoring->body)["error"]["param"], "ignore_eos") << ignoring->body;
}

// A model without a tokenizer (config tokenizer "none") serves token-id prompts: the ids come
// back (return_token_ids by default), equal to a byte-tokenizer twin's (same weights) greedy
// tokens, whole and streamed; what needs text is refused naming the field.
TEST_F(OpenAiTest, AModelWithoutATokenizerServesTokenIds) {
  ModelConfig config = TinyConfig();
  config.tokenizer = TokenizerKind::kNone;
  const Model ids_only = MakeRandomModel(config, 5);
  Api api(ids_only, 4);
  Api twin(model_, 4);
  const Json request = {{"model", "tiny"},
                        {"prompt", {104, 105, 33}},
                        {"max_tokens", 9},
                        {"temperature", 0},
                        {"ignore_eos", true}};
  httplib::Result whole = api.Post("/v1/completions", request);
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json choice = Json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["text"], "");
  EXPECT_EQ(choice["prompt_token_ids"], Json({104, 105, 33}));
  ASSERT_EQ(choice["token_ids"].size(), 9u) << whole->body;
  Json asked = request;
  asked["return_token_ids"] = true;
  httplib::Result reference = twin.Post("/v1/completions", asked);
  ASSERT_TRUE(reference);
  ASSERT_EQ(reference->status, 200) << reference->body;
  EXPECT_EQ(choice["token_ids"], Json::parse(reference->body)["choices"][0]["token_ids"]);

  Json stream = request;
  stream["stream"] = true;
  httplib::Result streamed = api.Post("/v1/completions", stream);
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  Json ids = Json::array();
  for (const std::string& event : Events(streamed->body)) {
    if (event == "[DONE]") continue;
    const Json chunk = Json::parse(event);
    for (const Json& id : chunk["choices"][0]["token_ids"]) ids.push_back(id);
  }
  EXPECT_EQ(ids, choice["token_ids"]) << streamed->body;

  struct Case {
    std::string field;
    Json value;
  };
  for (const Case& c : std::vector<Case>{{"prompt", "hi"},
                                         {"stop", "x"},
                                         {"guided_regex", "a+"},
                                         {"response_format", {{"type", "json_object"}}}}) {
    Json bad = request;
    bad[c.field] = c.value;
    httplib::Result refused = api.Post("/v1/completions", bad);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400) << c.field;
    EXPECT_EQ(Json::parse(refused->body)["error"]["param"], c.field) << refused->body;
  }
}

TEST_F(OpenAiTest, BearerTokensAreRequiredWhenConfigured) {
  Api api(model_, 4, {{.tenant = "alice", .token = "secret-a"}});
  httplib::Result without = api.Post("/v1/completions", Completion(2, false));
  ASSERT_TRUE(without);
  EXPECT_EQ(without->status, 401);
  EXPECT_EQ(Json::parse(without->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(api.Post("/v1/completions", Completion(2, false), {{"Authorization", "Bearer wrong"}})
                ->status,
            401);
  EXPECT_EQ(
      api.Post("/v1/completions", Completion(2, false), {{"Authorization", "Bearer secret-a"}})
          ->status,
      200);
  // Every route, an unknown one too, and the connection is closed after the answer.
  httplib::Result unknown = api.Client().Get("/v1/nope");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);
  EXPECT_EQ(unknown->get_header_value("Connection"), "close");
  EXPECT_EQ(api.Client().Get("/v1/nope", {{"Authorization", "Bearer secret-a"}})->status, 404);
}

TEST_F(OpenAiTest, UnauthenticatedRequestIsAnsweredBeforeItsBodyIsRead) {
  Api api(model_, 4, {{.tenant = "alice", .token = "secret-a"}});
  constexpr size_t kBody = 2 << 20;
  constexpr int kClients = 8;
  const std::string head = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n"
      "Content-Type: application/json\r\nContent-Length: ",
      kBody, "\r\n\r\n");
  const std::string part(64 << 10, 'x');
  const std::string rest(kBody - part.size(), 'x');
  std::vector<std::string> answers(kClients);
  std::vector<bool> rest_sent(kClients, false);
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&, i] {
        RawConnection connection(api.port());
        if (!connection.connected() || !connection.Send(head) || !connection.Send(part)) return;
        // The answer, and the server's end of the connection, come while 1984 KiB of the body
        // are unsent: it did not wait for them.
        answers[i] = connection.ReadToEnd();
        // What the client still sends is read and discarded: no reset.
        rest_sent[i] = connection.Send(rest);
      });
    }
    for (std::thread& t : clients) t.join();
  }
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(absl::StartsWith(answers[i], "HTTP/1.1 401 Unauthorized\r\n")) << answers[i];
    EXPECT_THAT(answers[i], HasSubstr("Connection: close\r\n"));
    EXPECT_THAT(answers[i], HasSubstr("invalid_api_key"));
    EXPECT_TRUE(rest_sent[i]);
  }
  EXPECT_TRUE(api.MetricsReach(absl::StrCat(
      "linserve_http_connections_refused_total{reason=\"unauthenticated\"} ", kClients, "\n")))
      << api.Metrics();
  EXPECT_EQ(
      api.Post("/v1/completions", Completion(2, false), {{"Authorization", "Bearer secret-a"}})
          ->status,
      200);
}

// What evhttp would answer in HTML before a handler runs, the server answers in its own JSON: a
// method a path does not take (405, with Allow; HEAD without a body), a body over the limit by
// Content-Length or in chunks (413), a malformed length or chunk and a head over 64 KiB (400),
// on a connection's first request and on a later one alike.
TEST_F(OpenAiTest, HttpErrorsBeforeTheHandlerAreJson) {
  Api api(model_, 4);
  httplib::Client client = api.Client();
  const std::vector<std::pair<std::string, std::string>> paths = {
      {"/v1/completions", "POST"},
      {"/v1/chat/completions", "POST"},
      {"/v1/models", "GET"},
      {"/v1/sessions", "POST"},
      {"/v1/sessions/0123456789abcdef0123456789abcdef", "GET, DELETE"}};
  for (const auto& [path, allow] : paths) {
    SCOPED_TRACE(path);
    for (int method = 0; method < 3; ++method) {
      httplib::Result reply = method == 0   ? client.Put(path, "{}", "application/json")
                              : method == 1 ? client.Patch(path, "{}", "application/json")
                                            : client.Options(path);
      ASSERT_TRUE(reply);
      EXPECT_EQ(reply->status, 405);
      EXPECT_EQ(reply->get_header_value("Allow"), allow);
      EXPECT_EQ(reply->get_header_value("Content-Type"), "application/json");
      EXPECT_TRUE(Json::parse(reply->body).contains("error")) << reply->body;
    }
    httplib::Result head = client.Head(path);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status, 405);
    EXPECT_EQ(head->get_header_value("Allow"), allow);
    EXPECT_EQ(head->body, "");
  }

  // A served request first (on the same connection), or none.
  const std::string served = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n";
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n";
  const std::string chunk(64 << 10, 'x');
  std::string chunks;  // 40 chunks of 64 KiB: 2.5 MiB, over max_prompt_bytes + 1 MiB (2 MiB)
  for (int i = 0; i < 40; ++i) absl::StrAppend(&chunks, "10000\r\n", chunk, "\r\n");
  struct Case {
    std::string name;
    std::string bytes;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"huge Content-Length", post + "Content-Length: 1000000000000\r\n\r\n", 413,
       "1000000000000 bytes"},
      {"negative Content-Length", post + "Content-Length: -5\r\n\r\n", 400, "Content-Length"},
      {"Content-Length not a number", post + "Content-Length: 12abc\r\n\r\n", 400,
       "Content-Length"},
      {"head over 64 KiB", post + "X-Big: " + std::string(70 << 10, 'h') + "\r\n\r\n", 400,
       "headers"},
      {"chunked over the limit", post + "Transfer-Encoding: chunked\r\n\r\n" + chunks, 413,
       "body"},
      {"malformed chunk", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n", 400,
       "chunked"},
      {"another transfer coding", post + "Transfer-Encoding: gzip, chunked\r\n\r\n", 400,
       "Transfer-Encoding"},
  };
  // One reply of a kept-alive connection: its head, then as many bytes as it says.
  auto read_reply = [](RawConnection& connection) {
    std::string reply;
    char buffer[4096];
    size_t body_at = std::string::npos;
    int64_t length = -1;
    while (connection.Readable(absl::Seconds(10))) {
      const ssize_t n = recv(connection.fd(), buffer, 1, 0);  // never past this reply
      if (n <= 0) break;
      reply.append(buffer, n);
      if (body_at == std::string::npos && (body_at = reply.find("\r\n\r\n")) != reply.npos) {
        body_at += 4;
        const size_t at = reply.find("Content-Length: ");
        if (at == std::string::npos ||
            !absl::SimpleAtoi(reply.substr(at + 16, reply.find("\r\n", at) - at - 16),
                              &length)) {
          break;
        }
      }
      if (length >= 0 && reply.size() >= body_at + length) break;
    }
    return reply;
  };
  for (const Case& c : cases) {
    for (bool after_a_request : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.name, after_a_request ? ", after a served request" : ""));
      RawConnection connection(api.port());
      ASSERT_TRUE(connection.connected());
      if (after_a_request) {
        ASSERT_TRUE(connection.Send(served));
        const std::string reply = read_reply(connection);
        ASSERT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << reply;
      }
      connection.Send(c.bytes);  // refused part way, the rest read and discarded
      const std::string answer = connection.ReadToEnd();
      EXPECT_TRUE(absl::StartsWith(answer, absl::StrCat("HTTP/1.1 ", c.status, " "))) << answer;
      EXPECT_THAT(answer, HasSubstr("Content-Type: application/json\r\n"));
      EXPECT_THAT(answer, HasSubstr("Connection: close\r\n"));
      const size_t body = answer.find("\r\n\r\n");
      ASSERT_NE(body, std::string::npos);
      const Json error = Json::parse(answer.substr(body + 4), nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(error.is_object() && error.contains("error")) << answer;
      EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr(c.says));
    }
  }
  // A pipelining client (its requests sent before the answers) is served, not refused.
  {
    RawConnection connection(api.port());
    ASSERT_TRUE(connection.connected());
    const std::string body = R"({"model": "tiny", "prompt": "to be", "max_tokens": 1})";
    ASSERT_TRUE(connection.Send(absl::StrCat(served, post, "Content-Length: ", body.size(),
                                             "\r\n\r\n", body, served)));
    for (int i = 0; i < 3; ++i) {
      const std::string reply = read_reply(connection);
      EXPECT_TRUE(absl::StartsWith(reply, "HTTP/1.1 200")) << i << ": " << reply;
    }
  }
  // The server goes on serving.
  EXPECT_EQ(api.Post("/v1/completions", Completion(2, false))->status, 200);
}

TEST_F(OpenAiTest, RequestStillIncompleteAtTheDeadlineIsClosed) {
  Api api(model_, 4, {}, {.request_deadline = absl::Seconds(1)});
  RawConnection connection(api.port());
  ASSERT_TRUE(connection.connected());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(connection.Send("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nX-Slow: "));
  // A byte every 100 ms: never idle, never complete.
  while (absl::Now() - start < absl::Seconds(10) && !connection.Readable(absl::Milliseconds(100))) {
    connection.Send("a");
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(connection.ReadToEnd(), "");  // closed, unanswered
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(10));
  EXPECT_TRUE(api.MetricsReach("linserve_http_connections_refused_total{reason=\"deadline\"} 1\n"))
      << api.Metrics();
  // A request in time is served.
  httplib::Result reply = api.Post("/v1/completions", Completion(2, false));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200) << reply->body;
}

TEST_F(OpenAiTest, ConnectionsBeyondTheLimitAreRefusedWhileAStreamFlows) {
  const Model model = SlowModel();
  constexpr int kLimit = 64;
  constexpr int kAttempts = 200;
  constexpr int kTokens = 2000;
  Api api(model, 2, {}, {.max_connections = kLimit});
  // A long stream on one connection, started first.
  absl::Notification first_chunk;
  std::string streamed;
  int status = 0;
  std::thread stream([&] {
    Json body = Completion(kTokens, true);
    body["stream_options"] = {{"include_usage", true}};
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.set_header("Content-Type", "application/json");
    request.body = body.dump();
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      streamed.append(data, size);
      if (!first_chunk.HasBeenNotified()) first_chunk.Notify();
      return true;
    };
    httplib::Result result = api.Client().send(request);
    if (result) status = result->status;
    if (!first_chunk.HasBeenNotified()) first_chunk.Notify();
  });
  first_chunk.WaitForNotification();
  // Idle connections: kLimit - 1 fit beside the stream's; the rest are answered 503 and closed.
  std::vector<std::unique_ptr<RawConnection>> connections;
  std::vector<pollfd> polled;
  for (int i = 0; i < kAttempts; ++i) {
    connections.push_back(std::make_unique<RawConnection>(api.port()));
    ASSERT_TRUE(connections.back()->connected());
    polled.push_back({.fd = connections.back()->fd(), .events = POLLIN, .revents = 0});
  }
  constexpr int kRefused = kAttempts - (kLimit - 1);
  int readable = 0;
  for (const absl::Time until = absl::Now() + absl::Seconds(30);
       readable < kRefused && absl::Now() < until;) {
    readable = poll(polled.data(), polled.size(), 100);
    ASSERT_GE(readable, 0);
  }
  EXPECT_EQ(readable, kRefused);
  for (int i = 0; i < kAttempts; ++i) {
    if (polled[i].revents == 0) continue;
    const std::string answer = connections[i]->ReadToEnd();
    EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 503 Service Unavailable\r\n")) << answer;
    EXPECT_THAT(answer, HasSubstr("--http_max_connections"));
  }
  EXPECT_TRUE(api.MetricsReach(absl::StrCat(
      "linserve_http_connections_refused_total{reason=\"connections\"} ", kRefused, "\n")))
      << api.Metrics();
  // The stream got every token.
  stream.join();
  ASSERT_EQ(status, 200) << streamed;
  const std::vector<std::string> events = Events(streamed);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[events.size() - 2])["usage"]["completion_tokens"], kTokens);
  // Closed connections leave room: a request is served once the server has seen them go.
  connections.clear();
  int served = 0;
  for (int i = 0; i < 200 && served != 200; ++i) {
    httplib::Result reply = api.Post("/v1/completions", Completion(2, false));
    served = reply ? reply->status : 0;
    if (served != 200) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(served, 200);
}

TEST_F(OpenAiTest, ClientThatDisconnectsMidStreamFreesTheOnlySlot) {
  // The stream is still running when its client goes away.
  const Model model = SlowModel();
  Api api(model, 1);
  std::atomic<int> chunks = 0;
  httplib::Request stream;
  stream.method = "POST";
  stream.path = "/v1/completions";
  stream.set_header("Content-Type", "application/json");
  stream.body = Completion(4096, true).dump();
  stream.content_receiver = [&chunks](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;
  };
  httplib::Result aborted = api.Client().send(stream);
  EXPECT_FALSE(aborted);  // the receiver stopped reading and closed the connection
  EXPECT_GE(chunks.load(), 3);
  // The engine has one slot: this completes only once the abandoned stream's job is cancelled.
  httplib::Result next = api.Post("/v1/completions", Completion(4, false));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
  EXPECT_TRUE(api.MetricsReach("linserve_generations_total{outcome=\"cancelled\"} 1\n"))
      << api.Metrics();
  EXPECT_TRUE(
      api.MetricsReach("linserve_http_requests_total{endpoint=\"completions\",code=\"499\"} 1\n"))
      << api.Metrics();
}

TEST_F(OpenAiTest, ManyConcurrentStreamsEachGetEveryToken) {
  Api api(model_, 8);
  constexpr int kStreams = 64;
  constexpr int kTokens = 16;
  std::vector<std::string> bodies(kStreams);
  std::vector<int> statuses(kStreams, 0);
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
      clients.emplace_back([&api, &bodies, &statuses, i] {
        Json request = Completion(kTokens, true);
        request["stream_options"] = {{"include_usage", true}};
        request["seed"] = i;
        httplib::Result reply = api.Post("/v1/completions", request);
        if (!reply) return;
        statuses[i] = reply->status;
        bodies[i] = reply->body;
      });
    }
    for (std::thread& t : clients) t.join();
  }
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(statuses[i], 200) << bodies[i];
    const std::vector<std::string> events = Events(bodies[i]);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(Json::parse(events[events.size() - 2])["usage"]["completion_tokens"], kTokens);
  }
  EXPECT_TRUE(
      api.MetricsReach(absl::StrCat("linserve_generated_tokens_total ", kStreams * kTokens, "\n")));
}

TEST_F(OpenAiTest, StreamsFlowWhileAnotherPromptIsTokenized) {
  auto blocking = std::make_unique<BlockingTokenizer>(std::move(model_.tokenizer));
  const BlockingTokenizer& tokenizer = *blocking;
  model_.tokenizer = std::move(blocking);
  Api api(model_, 4);
  // A large prompt whose tokenizing does not end until released.
  int blocked_status = 0;
  std::string blocked_body;
  std::thread slow([&api, &blocked_status, &blocked_body] {
    Json request = Completion(2, false);
    request["prompt"] = "BLOCK" + std::string(512 << 10, 'a');
    httplib::Result reply = api.Post("/v1/completions", request);
    if (!reply) return;
    blocked_status = reply->status;
    blocked_body = reply->body;
  });
  tokenizer.WaitUntilEntered();
  // Meanwhile another client's stream gets every token (read before the release, which comes
  // whatever happened, so that a failure cannot hang the test).
  Json request = Completion(16, true);
  request["stream_options"] = {{"include_usage", true}};
  httplib::Result streamed = api.Post("/v1/completions", request);
  tokenizer.Release();
  slow.join();
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  const std::vector<std::string> events = Events(streamed->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(Json::parse(events[events.size() - 2])["usage"]["completion_tokens"], 16);
  // 512 KiB of one byte a token exceeds max_prompt_tokens: what matters is the answer came.
  EXPECT_EQ(blocked_status, 400) << blocked_body;
  EXPECT_THAT(blocked_body, HasSubstr("max_prompt_tokens"));
}

}  // namespace
}  // namespace linserve
