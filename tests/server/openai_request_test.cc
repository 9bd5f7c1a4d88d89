// The OpenAI API's edge, without a server: ChatTemplate, ParseOpenAiRequest, the error mapping
// and the streamed chunks' JSON (end-to-end tests with the official client: tests/clients/openai).
#include "server/transport/openai_request.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/no_tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/token_vocabulary.h"
#include "server/transport/chat_template.h"
#include "server/transport/openai_error.h"
#include "server/transport/openai_response.h"

namespace linserve {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTemplate[] = R"({
  "message": "{name}: {content}\n",
  "generation_prompt": "{name}:",
  "names": {"system": "", "user": "ROMEO", "assistant": "JULIET"}
})";

class OpenAiRequestTest : public ::testing::Test {
 protected:
  OpenAiRequestTest()
      : tokenizer_(260),
        template_(*ChatTemplate::Parse(kTemplate, "test")),
        constraints_(TokenVocabulary::Create(tokenizer_, 257), ConstraintLimits()),
        context_{.model_id = "m",
                 .tokenizer = &tokenizer_,
                 .limits = RequestLimits(),
                 .chat_template = &template_,
                 .constraints = &constraints_} {}

  absl::StatusOr<OpenAiRequest> Parse(OpenAiEndpoint endpoint, const json& body) {
    return ParseOpenAiRequest(endpoint, body.dump(), context_, "id");
  }
  absl::StatusOr<OpenAiRequest> Completion(json body) {
    body["model"] = "m";
    return Parse(OpenAiEndpoint::kCompletions, body);
  }
  absl::StatusOr<OpenAiRequest> Chat(json body) {
    body["model"] = "m";
    if (!body.contains("messages")) body["messages"] = {{{"role", "user"}, {"content", "a"}}};
    return Parse(OpenAiEndpoint::kChatCompletions, body);
  }
  // The param of the error a request gets.
  std::string ParamOf(const absl::StatusOr<OpenAiRequest>& r) {
    EXPECT_FALSE(r.ok());
    return ToApiError(r.status()).param.value_or("(none)");
  }

  ByteTokenizer tokenizer_;
  ChatTemplate template_;
  ConstraintCache constraints_;
  OpenAiContext context_;
};

// What the request's constraint compiled from; a failed test when it has none.
ConstraintSpec SpecOf(const absl::StatusOr<OpenAiRequest>& r) {
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok() || r->generate.constraint == nullptr) {
    ADD_FAILURE() << "no constraint";
    return {};
  }
  return r->generate.constraint->spec();
}

TEST(ChatTemplateTest, AppliesNamesOnceAndRefusesIncompleteFiles) {
  const ChatTemplate t = *ChatTemplate::Parse(kTemplate, "test");
  EXPECT_TRUE(t.HasRole("system"));
  EXPECT_FALSE(t.HasRole("tool"));
  // Client text is substituted once: placeholders in it stay as they are.
  EXPECT_EQ(t.Apply({{"system", std::nullopt, "Verona."},
                     {"user", std::nullopt, "{name} {content}"},
                     {"user", "MERCUTIO", "Nay"}}),
            "Verona.\n\nROMEO: {name} {content}\nMERCUTIO: Nay\nJULIET:");
  EXPECT_THAT(
      ChatTemplate::Parse(R"({"generation_prompt": "", "names": {}})", "f").status().message(),
      HasSubstr("f: message: required"));
  EXPECT_THAT(ChatTemplate::Parse(R"({"message": "", "generation_prompt": "",
                                      "names": {"user": "A"}})",
                                  "f")
                  .status()
                  .message(),
              HasSubstr("\"user\" and \"assistant\""));
  EXPECT_THAT(ChatTemplate::Parse("[1]", "f").status().message(), HasSubstr("not a JSON object"));
}

TEST(ChatTemplateTest, TheBundledModelHasOne) {
  absl::StatusOr<std::optional<ChatTemplate>> t = ChatTemplate::Load(LINSERVE_DEFAULT_MODEL_DIR);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ((*t)->Apply({{"user", std::nullopt, "Hark"}}), "ROMEO:\nHark\n\nJULIET:\n");
  EXPECT_FALSE(ChatTemplate::Load("/nonexistent")->has_value());
}

TEST_F(OpenAiRequestTest, ReturnTokenIds) {
  EXPECT_FALSE(Completion({{"prompt", "a"}})->return_token_ids);
  EXPECT_TRUE(Completion({{"prompt", "a"}, {"return_token_ids", true}})->return_token_ids);
  EXPECT_TRUE(Chat({{"return_token_ids", true}})->return_token_ids);
  EXPECT_FALSE(Completion({{"prompt", "a"}, {"return_token_ids", nullptr}})->return_token_ids);
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"return_token_ids", 1}})), "return_token_ids");
}

// A model without a tokenizer: prompts are token ids, and the ids come back by default.
TEST_F(OpenAiRequestTest, AModelWithoutATokenizerTakesTokenIds) {
  NoTokenizer none(260);
  context_.tokenizer = &none;
  absl::StatusOr<OpenAiRequest> ids = Completion({{"prompt", {5, 6}}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(ids->generate.prompt, ElementsAre(5, 6));
  EXPECT_TRUE(ids->return_token_ids);
  EXPECT_FALSE(Completion({{"prompt", {5}}, {"return_token_ids", false}})->return_token_ids);
  absl::StatusOr<OpenAiRequest> text = Completion({{"prompt", "ab"}});
  EXPECT_EQ(ParamOf(text), "prompt");
  EXPECT_THAT(text.status().message(), HasSubstr("no tokenizer"));
}

TEST_F(OpenAiRequestTest, CompletionPrompts) {
  EXPECT_THAT(Completion({{"prompt", "ab"}})->generate.prompt, ElementsAre('a', 'b'));
  EXPECT_THAT(Completion({{"prompt", {"ab"}}})->generate.prompt, ElementsAre('a', 'b'));
  EXPECT_THAT(Completion({{"prompt", {5, 6}}})->generate.prompt, ElementsAre(5, 6));
  EXPECT_THAT(Completion({{"prompt", {{5, 6}}}})->generate.prompt, ElementsAre(5, 6));
  EXPECT_EQ(ParamOf(Completion({{"prompt", {"a", "b"}}})), "prompt");
  EXPECT_EQ(ParamOf(Completion({{"prompt", ""}})), "prompt");
  EXPECT_EQ(ParamOf(Completion({{"prompt", {5, -1}}})), "prompt[1]");
  EXPECT_EQ(ParamOf(Completion({})), "prompt");
  EXPECT_EQ(ParamOf(Completion({{"prompt", 3}})), "prompt");
}

TEST_F(OpenAiRequestTest, FieldsReachTheEngineRequest) {
  absl::StatusOr<OpenAiRequest> r = Completion({{"prompt", "a"},
                                                {"max_tokens", 7},
                                                {"temperature", 0.5},
                                                {"top_p", 0.9},
                                                {"top_k", -1},
                                                {"min_p", 0.1},
                                                {"presence_penalty", 1},
                                                {"frequency_penalty", -1},
                                                {"repetition_penalty", 1.2},
                                                {"seed", 42},
                                                {"stop", "x"},
                                                {"n", 1},
                                                {"user", "u"},
                                                {"ignore_eos", true},
                                                {"session_id", std::string(32, 'a')},
                                                {"logprobs", 0},
                                                {"unknown_field", {1, 2}},
                                                {"echo", nullptr}});
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerateRequest& g = r->generate;
  EXPECT_EQ(g.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 1);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -1);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_THAT(g.stop, ElementsAre("x"));
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.session_id->value, std::string(32, 'a'));
  // logprobs 0: the token's own logprob, which the engine gives with one alternative.
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 0);
  EXPECT_EQ(g.top_logprobs, 1);
  EXPECT_EQ(Completion({{"prompt", "a"}})->generate.max_new_tokens, kDefaultMaxNewTokens);
  EXPECT_EQ(Completion({{"prompt", "a"}, {"logprobs", 3}})->generate.top_logprobs, 3);
  EXPECT_EQ(Completion({{"prompt", "a"}})->generate.top_logprobs, 0);
  // logit_bias: string keys to token ids, the biases as floats.
  absl::StatusOr<OpenAiRequest> biased =
      Completion({{"prompt", "a"}, {"logit_bias", {{"7", -100}, {"120", 2.5}}}});
  ASSERT_TRUE(biased.ok()) << biased.status();
  std::vector<std::pair<TokenId, float>> got;
  for (const LogitBias& entry : biased->generate.sampling.logit_bias) {
    got.push_back({entry.token, entry.bias});
  }
  std::sort(got.begin(), got.end());
  EXPECT_THAT(got, ElementsAre(std::pair<TokenId, float>{7, -100.0f},
                               std::pair<TokenId, float>{120, 2.5f}));
  EXPECT_TRUE(Completion({{"prompt", "a"}, {"logit_bias", nullptr}})
                  ->generate.sampling.logit_bias.empty());
  // echo: the engine scores the prompt (its text comes with its logprobs), max_tokens may be 0.
  absl::StatusOr<OpenAiRequest> echo =
      Completion({{"prompt", "ab"}, {"echo", true}, {"max_tokens", 0}, {"logprobs", 2}});
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_TRUE(echo->echo);
  EXPECT_EQ(echo->generate.max_new_tokens, 0);
  EXPECT_EQ(echo->generate.prompt_logprobs, 2);
  EXPECT_EQ(Completion({{"prompt", "ab"}, {"echo", true}})->generate.prompt_logprobs, 0);
  EXPECT_EQ(Completion({{"prompt", "ab"}})->generate.prompt_logprobs, -1);
}

TEST_F(OpenAiRequestTest, ChatFields) {
  absl::StatusOr<OpenAiRequest> r = Chat(
      {{"messages",
        {{{"role", "user"},
          {"content", {{{"type", "text"}, {"text", "h"}}, {{"type", "text"}, {"text", "i"}}}}}}},
       {"max_tokens", 3},
       {"max_completion_tokens", 5},
       {"logprobs", true},
       {"stream", true},
       {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.max_new_tokens, 5);
  EXPECT_EQ(r->max_tokens_field, "max_completion_tokens");
  EXPECT_EQ(r->generate.top_logprobs, 1);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  std::string text(r->generate.prompt.begin(), r->generate.prompt.end());
  EXPECT_EQ(text, "ROMEO: hi\nJULIET:");
  EXPECT_EQ(Chat({{"logprobs", true}, {"top_logprobs", 4}})->generate.top_logprobs, 4);
}

TEST_F(OpenAiRequestTest, InvalidValuesNameTheirField) {
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"n", 17}})), "n");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"best_of", 2}})), "best_of");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"suffix", "z"}})), "suffix");
  EXPECT_EQ(ParamOf(Chat({{"tools", {{{"type", "function"}}}}})), "tools");
  EXPECT_EQ(ParamOf(Chat({{"functions", {{{"name", "f"}}}}})), "functions");
  EXPECT_TRUE(Completion({{"prompt", "a"}, {"best_of", 1}, {"suffix", nullptr}}).ok());
  EXPECT_TRUE(Chat({{"tools", json::array()}}).ok());
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"n", 2}, {"echo", true}})), "echo");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"n", 2}, {"session_choice", 2}})), "session_choice");
  EXPECT_EQ(Completion({{"prompt", "a"}, {"n", 3}, {"session_choice", 2}})->generate.session_choice, 2);
  EXPECT_EQ(Completion({{"prompt", "a"}, {"n", 3}})->generate.n, 3);
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"max_tokens", 0}})), "max_tokens");
  EXPECT_THAT(Completion({{"prompt", "a"}, {"max_tokens", 0}}).status().message(),
              HasSubstr("0 only with \"echo\": true"));
  EXPECT_EQ(ParamOf(Chat({{"echo", true}})), "echo");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"echo", 1}})), "echo");
  // A whole answer's logprob entries count the echoed prompt's tokens.
  EXPECT_THAT(Completion({{"prompt", std::string(1000, 'a')},
                          {"echo", true},
                          {"logprobs", 20},
                          {"max_tokens", 600}})
                  .status()
                  .message(),
              HasSubstr("(600 + 1000) x 21 = 33600 logprob entries exceed"));
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"max_tokens", 1.5}})), "max_tokens");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"max_completion_tokens", 5000}})),
            "max_completion_tokens");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"temperature", "hot"}})), "temperature");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"seed", 1e30}})), "seed");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"top_k", -2}})), "top_k");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"logprobs", 21}})), "logprobs");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"stop", {"a", 1}}})), "stop[1]");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"stop", std::vector<std::string>(17, "s")}})),
            "stop");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"user", 1}})), "user");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"stream", "yes"}})), "stream");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"stream_options", json::object()}})),
            "stream_options");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"session_id", "short"}})), "session_id");
  EXPECT_EQ(ParamOf(Chat({{"messages", json::array()}})), "messages");
  EXPECT_EQ(ParamOf(Chat({{"messages", {{{"role", "tool"}, {"content", "a"}}}}})),
            "messages[0].role");
  EXPECT_EQ(ParamOf(Chat({{"messages", {{{"role", "user"}, {"content", 1}}}}})),
            "messages[0].content");
  EXPECT_EQ(ParamOf(Chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}}})),
            "messages[0].content[0].type");
  EXPECT_EQ(ParamOf(Chat({{"top_logprobs", 2}})), "top_logprobs");
  for (const json& bias : {json::array({1}), json{{"x1", 1}}, json{{"-1", 1}}, json{{"", 1}},
                           json{{"99999999999", 1}}, json{{"3", "high"}}, json{{"3", 100.5}},
                           json{{"3", -1e300}}}) {
    SCOPED_TRACE(bias.dump());
    EXPECT_EQ(ParamOf(Completion({{"prompt", "a"}, {"logit_bias", bias}})), "logit_bias");
  }
  json many = json::object();
  for (int t = 0; t <= kMaxLogitBias; ++t) many[std::to_string(t)] = 1;
  const absl::StatusOr<OpenAiRequest> too_many = Completion({{"prompt", "a"}, {"logit_bias", many}});
  EXPECT_EQ(ParamOf(too_many), "logit_bias");
  EXPECT_THAT(too_many.status().message(), HasSubstr("301 entries exceed the limit of 300"));
  // Integers from 2^63 to 2^64 - 1 (nlohmann's unsigned) are out of range, never wrapped to a
  // negative (-1 would mean "off" for top_k).
  for (const char* field : {"max_tokens", "top_k", "seed"}) {
    SCOPED_TRACE(field);
    for (const uint64_t big : {uint64_t{1} << 63, ~uint64_t{0}}) {
      const absl::StatusOr<OpenAiRequest> r = Completion({{"prompt", "a"}, {field, big}});
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(ParamOf(r), field);
      EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("got ", big)));
      EXPECT_THAT(r.status().message(), Not(HasSubstr("got -")));
    }
  }
  // Another model is 404; no model, 400.
  const ApiError other =
      ToApiError(Parse(OpenAiEndpoint::kCompletions, {{"model", "x"}, {"prompt", "a"}}).status());
  EXPECT_EQ(other.http_status, 404);
  EXPECT_EQ(other.code, "model_not_found");
  EXPECT_EQ(ToApiError(Parse(OpenAiEndpoint::kCompletions, {{"prompt", "a"}}).status()).http_status,
            400);
  // No template: chat is refused.
  context_.chat_template = nullptr;
  EXPECT_THAT(Chat({}).status().message(), HasSubstr("no chat template"));
}

const json kSchema = {{"type", "object"},
                      {"properties", {{"answer", {{"type", "string"}}}}},
                      {"required", {"answer"}},
                      {"additionalProperties", false}};

TEST_F(OpenAiRequestTest, ResponseFormatShapes) {
  // text, null or absent: no constraint.
  for (const json& format : {json{{"type", "text"}}, json(nullptr)}) {
    absl::StatusOr<OpenAiRequest> r = Chat({{"response_format", format}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->generate.constraint, nullptr);
    EXPECT_EQ(r->constraint_field, "");
  }
  EXPECT_EQ(Chat({})->generate.constraint, nullptr);
  absl::StatusOr<OpenAiRequest> object = Chat({{"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(SpecOf(object), (ConstraintSpec{ConstraintKind::kJsonObject, ""}));
  EXPECT_EQ(object->constraint_field, "response_format");
  // json_schema on both endpoints, strict either way; the schema goes to the compiler as the
  // text nlohmann::json writes.
  for (const json& strict : {json(true), json(false), json(nullptr)}) {
    const json format = {{"type", "json_schema"},
                         {"json_schema",
                          {{"name", "an_answer-1"},
                           {"description", "The answer."},
                           {"schema", kSchema},
                           {"strict", strict}}}};
    EXPECT_EQ(SpecOf(Chat({{"response_format", format}})),
              (ConstraintSpec{ConstraintKind::kJsonSchema, kSchema.dump()}));
    EXPECT_EQ(SpecOf(Completion({{"prompt", "a"}, {"response_format", format}})),
              (ConstraintSpec{ConstraintKind::kJsonSchema, kSchema.dump()}));
  }
}

TEST_F(OpenAiRequestTest, GuidedFields) {
  EXPECT_EQ(SpecOf(Completion({{"prompt", "a"}, {"guided_json", kSchema}})),
            (ConstraintSpec{ConstraintKind::kJsonSchema, kSchema.dump()}));
  EXPECT_EQ(SpecOf(Completion({{"prompt", "a"}, {"guided_json", R"({"type": "integer"})"}})),
            (ConstraintSpec{ConstraintKind::kJsonSchema, R"({"type": "integer"})"}));
  absl::StatusOr<OpenAiRequest> regex = Chat({{"guided_regex", "(yes|no)"}});
  EXPECT_EQ(SpecOf(regex), (ConstraintSpec{ConstraintKind::kRegex, "(yes|no)"}));
  EXPECT_EQ(regex->constraint_field, "guided_regex");
  EXPECT_EQ(SpecOf(Chat({{"guided_grammar", "root ::= \"a\"+"}})),
            (ConstraintSpec{ConstraintKind::kGrammar, "root ::= \"a\"+"}));
  // "text" is no constraint: a guided field goes with it.
  EXPECT_EQ(SpecOf(Chat({{"response_format", {{"type", "text"}}}, {"guided_regex", "a"}})).kind,
            ConstraintKind::kRegex);
}

TEST_F(OpenAiRequestTest, AtMostOneConstraint) {
  absl::StatusOr<OpenAiRequest> r =
      Chat({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}});
  EXPECT_EQ(ParamOf(r), "guided_regex");
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("cannot be combined with response_format"));
  EXPECT_EQ(ParamOf(Chat({{"guided_json", kSchema}, {"guided_grammar", "root ::= \"a\""}})),
            "guided_grammar");
  EXPECT_EQ(ParamOf(Chat({{"guided_choice", {"a", "b"}}})), "guided_choice");
}

TEST_F(OpenAiRequestTest, BadResponseFormatsNameTheirField) {
  const auto with = [&](const json& format) { return ParamOf(Chat({{"response_format", format}})); };
  EXPECT_EQ(with("json_object"), "response_format");
  EXPECT_EQ(with(json::object()), "response_format.type");
  EXPECT_EQ(with({{"type", "xml"}}), "response_format.type");
  EXPECT_EQ(with({{"type", "json_schema"}}), "response_format.json_schema");
  EXPECT_EQ(with({{"type", "json_schema"}, {"json_schema", {{"schema", kSchema}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(with({{"type", "json_schema"}, {"json_schema", {{"name", "a b"}, {"schema", kSchema}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(with({{"type", "json_schema"},
                  {"json_schema", {{"name", std::string(65, 'a')}, {"schema", kSchema}}}}),
            "response_format.json_schema.name");
  EXPECT_EQ(with({{"type", "json_schema"}, {"json_schema", {{"name", "n"}}}}),
            "response_format.json_schema.schema");
  EXPECT_EQ(with({{"type", "json_schema"},
                  {"json_schema", {{"name", "n"}, {"schema", kSchema}, {"strict", "yes"}}}}),
            "response_format.json_schema.strict");
  EXPECT_EQ(with({{"type", "json_schema"},
                  {"json_schema", {{"name", "n"}, {"schema", kSchema}, {"description", 1}}}}),
            "response_format.json_schema.description");
  EXPECT_EQ(ParamOf(Chat({{"guided_json", 3}})), "guided_json");
  EXPECT_EQ(ParamOf(Chat({{"guided_regex", {"a"}}})), "guided_regex");
  EXPECT_EQ(ParamOf(Chat({{"guided_grammar", 1}})), "guided_grammar");
}

TEST_F(OpenAiRequestTest, ConstraintsTheCompilerRefusesAre400sNamingTheField) {
  json schema = kSchema;
  schema["properties"]["answer"]["format"] = "email";
  absl::StatusOr<OpenAiRequest> r = Chat(
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}});
  ASSERT_FALSE(r.ok());
  const ApiError e = ToApiError(r.status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_THAT(e.message, StartsWith("response_format.json_schema.schema: "));
  EXPECT_THAT(e.message, HasSubstr("format"));
  EXPECT_EQ(ParamOf(Chat({{"guided_json", schema}})), "guided_json");
  EXPECT_EQ(ParamOf(Chat({{"guided_json", "{not json"}})), "guided_json");
  EXPECT_EQ(ParamOf(Chat({{"guided_regex", "(a"}})), "guided_regex");
  EXPECT_EQ(ParamOf(Chat({{"guided_grammar", "start ::= \"a\""}})), "guided_grammar");
  EXPECT_EQ(ParamOf(Completion({{"prompt", "a"},
                                {"guided_regex", std::string(ConstraintLimits().max_text_bytes + 1,
                                                             'a')}})),
            "guided_regex");
}

TEST_F(OpenAiRequestTest, HostileBodiesAreRefusedNotCrashedOn) {
  for (const std::string& body : {std::string("{"), std::string("[1]"), std::string("\xff"),
                                  std::string(100000, '[') + std::string(100000, ']')}) {
    absl::StatusOr<OpenAiRequest> r =
        ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, context_, "id");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ToApiError(r.status()).param, "body");
  }
  context_.limits.max_prompt_bytes = 4;
  EXPECT_EQ(ParamOf(Completion({{"prompt", "abcde"}})), "prompt");
  EXPECT_EQ(ParamOf(Chat({{"messages", {{{"role", "user"}, {"content", "abcde"}}}}})), "messages");
}

TEST_F(OpenAiRequestTest, EngineErrorsAreRenamed) {
  const OpenAiRequest chat = *Chat({{"max_completion_tokens", 3}});
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("sampling.top_p: bad"), chat).message(),
            "top_p: bad");
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("max_new_tokens: bad"), chat).message(),
            "max_completion_tokens: bad");
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("prompt: long"), chat).message(),
            "messages: long");
  const OpenAiRequest completion = *Completion({{"prompt", "a"}});
  EXPECT_EQ(
      RenameEngineError(absl::InvalidArgumentError("prompt.token_ids[2]: x"), completion).message(),
      "prompt[2]: x");
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("top_logprobs: x"), completion).message(),
            "logprobs: x");
  EXPECT_EQ(
      RenameEngineError(absl::InvalidArgumentError("prompt_logprobs: x"), completion).message(),
      "logprobs: x");
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError(
                                  "sampling.logit_bias: token 9 is outside the vocabulary [0, 5)"),
                              completion)
                .message(),
            "logit_bias: token 9 is outside the vocabulary [0, 5)");
  EXPECT_EQ(RenameEngineError(absl::NotFoundError("session gone"), completion).message(),
            "session gone");
  const OpenAiRequest constrained = *Chat({{"guided_regex", "a"}});
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("constraint.regex: x"), constrained)
                .message(),
            "guided_regex: x");
  EXPECT_EQ(RenameEngineError(absl::InvalidArgumentError("constraint: x"), constrained).message(),
            "guided_regex: x");
}

TEST(ApiErrorTest, StatusesAndShape) {
  EXPECT_EQ(ToApiError(absl::UnauthenticatedError("no")).http_status, 401);
  EXPECT_EQ(ToApiError(absl::AbortedError("busy")).http_status, 409);
  EXPECT_EQ(ToApiError(absl::ResourceExhaustedError("full")).http_status, 429);
  EXPECT_EQ(ToApiError(absl::UnavailableError("down")).http_status, 503);
  EXPECT_EQ(ToApiError(absl::InternalError("x")).http_status, 500);
  // Only a leading field name becomes the param.
  EXPECT_FALSE(ToApiError(absl::InvalidArgumentError("two words: x")).param.has_value());
  const json j = json::parse(ApiErrorJson(ToApiError(absl::InvalidArgumentError("stop[0]: x"))));
  EXPECT_EQ(j, json::parse(R"({"error": {"message": "stop[0]: x", "type": "invalid_request_error",
                                         "param": "stop[0]", "code": null}})"));
}

TEST(OpenAiResponseTest, StreamedChunksAreJsonWhateverTheText) {
  ByteTokenizer tokenizer(260);
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kChatCompletions;
  request.stream = true;
  OpenAiResponse response(request, "chatcmpl-1", 100, "m", tokenizer);
  const std::string tricky = "a\"b\\c\nd\te\x01\x1f é 🙂 </script>";
  for (int i = 0; i < 2; ++i) {
    const std::string event = response.StreamTokens(0, {EmittedToken{{}, tricky}});
    ASSERT_TRUE(event.starts_with("data: ") && event.ends_with("\n\n")) << event;
    const json chunk = json::parse(event.substr(6));
    EXPECT_EQ(chunk["choices"][0]["delta"]["content"], tricky);
    EXPECT_EQ(chunk["choices"][0]["delta"].contains("role"), i == 0);
    EXPECT_EQ(chunk["id"], "chatcmpl-1");
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  }
  GenerationResult result;
  result.reason = FinishReason::kStop;
  ASSERT_TRUE(response.EndChoice(0, result));
  const std::string end = response.StreamChoiceEnd(0) + response.StreamEnd();
  EXPECT_TRUE(end.ends_with("data: [DONE]\n\n"));
  EXPECT_THAT(end, HasSubstr("\"finish_reason\":\"stop\""));
}

// Three choices: chunks carry their choice's index, each choice's role comes once, the whole
// answer lists the choices in index order, and the usage counts the prompt once.
TEST(OpenAiResponseTest, ChoicesHaveTheirIndexAndTheUsageCountsThePromptOnce) {
  ByteTokenizer tokenizer(260);
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kChatCompletions;
  request.generate.n = 3;
  OpenAiResponse streamed(request, "chatcmpl-2", 100, "m", tokenizer);
  OpenAiResponse whole(request, "chatcmpl-2", 100, "m", tokenizer);
  for (int32_t choice : {2, 0, 2, 1}) {
    const std::string text = absl::StrCat("t", choice);
    const json chunk =
        json::parse(streamed.StreamTokens(choice, {EmittedToken{{}, text}}).substr(6));
    EXPECT_EQ(chunk["choices"][0]["index"], choice);
    EXPECT_EQ(chunk["choices"][0]["delta"]["content"], text);
    whole.Append(choice, {EmittedToken{{}, text}});
  }
  for (int32_t choice : {1, 2, 0}) {
    GenerationResult result;
    result.reason = choice == 1 ? FinishReason::kEos : FinishReason::kLength;
    result.usage.prompt_tokens = 7;
    result.usage.generated_tokens = choice + 1;
    EXPECT_EQ(streamed.EndChoice(choice, result), choice == 0);
    EXPECT_EQ(whole.EndChoice(choice, result), choice == 0);
    const json end = json::parse(streamed.StreamChoiceEnd(choice).substr(6));
    EXPECT_EQ(end["choices"][0]["index"], choice);
  }
  const json answer = json::parse(whole.Finish());
  ASSERT_EQ(answer["choices"].size(), 3u);
  EXPECT_EQ(answer["choices"][2]["index"], 2);
  EXPECT_EQ(answer["choices"][2]["message"]["content"], "t2t2");
  EXPECT_EQ(answer["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 1 + 2 + 3);
  EXPECT_EQ(answer["usage"]["total_tokens"], 7 + 6);
}

EmittedToken Emitted(TokenId id, std::string text, bool echoed = false) {
  EmittedToken t;
  t.token.id = id;
  t.text = std::move(text);
  t.echoed = echoed;
  return t;
}

// return_token_ids: the generated ids (never an echoed prompt's) on every chunk and in the whole
// answer, the prompt's once per choice (completions) or per response (chat).
TEST(OpenAiResponseTest, TokenIdsComeWithTheTextWhenAskedFor) {
  ByteTokenizer tokenizer(260);
  for (OpenAiEndpoint endpoint : {OpenAiEndpoint::kCompletions, OpenAiEndpoint::kChatCompletions}) {
    const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
    OpenAiRequest request;
    request.endpoint = endpoint;
    request.return_token_ids = true;
    request.generate.prompt = {104, 105};
    request.generate.n = 2;
    OpenAiResponse streamed(request, "x", 100, "m", tokenizer);
    OpenAiResponse whole(request, "x", 100, "m", tokenizer);
    const EmittedToken echoed = Emitted(104, "h", /*echoed=*/true);
    const EmittedToken a = Emitted(97, "a");
    const EmittedToken special = Emitted(257, "");  // no text, still its own chunk
    std::vector<json> chunks;
    for (const auto& [choice, tokens] : std::vector<std::pair<int32_t, std::vector<EmittedToken>>>{
             {0, {echoed, a}}, {1, {special}}, {0, {special}}}) {
      const std::string event = streamed.StreamTokens(choice, tokens);
      ASSERT_FALSE(event.empty());
      chunks.push_back(json::parse(event.substr(6)));
      whole.Append(choice, tokens);
    }
    EXPECT_EQ(chunks[0]["choices"][0]["token_ids"], json({97}));
    EXPECT_EQ(chunks[1]["choices"][0]["token_ids"], json({257}));
    EXPECT_EQ(chunks[2]["choices"][0]["token_ids"], json({257}));
    if (chat) {
      EXPECT_EQ(chunks[0]["prompt_token_ids"], json({104, 105}));
      EXPECT_FALSE(chunks[1].contains("prompt_token_ids"));
    } else {
      EXPECT_EQ(chunks[0]["choices"][0]["prompt_token_ids"], json({104, 105}));
      EXPECT_EQ(chunks[1]["choices"][0]["prompt_token_ids"], json({104, 105}));
      EXPECT_FALSE(chunks[2]["choices"][0].contains("prompt_token_ids"));
    }
    GenerationResult result;
    result.reason = FinishReason::kLength;
    for (int32_t choice : {0, 1}) {
      streamed.EndChoice(choice, result);
      whole.EndChoice(choice, result);
    }
    const json end = json::parse(streamed.StreamChoiceEnd(1).substr(6));
    EXPECT_EQ(end["choices"][0]["token_ids"], json::array());
    const json answer = json::parse(whole.Finish());
    EXPECT_EQ(answer["choices"][0]["token_ids"], json({97, 257}));
    EXPECT_EQ(answer["choices"][1]["token_ids"], json({257}));
    if (chat) {
      EXPECT_EQ(answer["prompt_token_ids"], json({104, 105}));
    } else {
      EXPECT_EQ(answer["choices"][1]["prompt_token_ids"], json({104, 105}));
    }
  }
  // Not asked for: no ids, and a token without text sends nothing.
  OpenAiRequest plain;
  OpenAiResponse response(plain, "x", 100, "m", tokenizer);
  EXPECT_EQ(response.StreamTokens(0, {Emitted(257, "")}), "");
}

// Without a tokenizer, logprobs name tokens "token_id:<id>" (their bytes would all be empty).
TEST(OpenAiResponseTest, LogprobsNameTokensByIdWithoutATokenizer) {
  NoTokenizer tokenizer(300);
  OpenAiRequest request;
  request.logprobs = true;
  request.top_logprobs = 1;
  OpenAiResponse response(request, "x", 100, "m", tokenizer);
  GeneratedToken token{.id = 42, .logprob = -0.5f, .top_logprobs = {{.token = 7, .logprob = -1}}};
  response.Append(0, {EmittedToken{token, ""}});
  GenerationResult result;
  response.EndChoice(0, result);
  const json answer = json::parse(response.Finish());
  EXPECT_EQ(answer["choices"][0]["logprobs"]["tokens"], json({"token_id:42"}));
  EXPECT_EQ(answer["choices"][0]["logprobs"]["top_logprobs"][0].begin().key(), "token_id:7");
}

TEST(OpenAiResponseTest, ACompletedConstraintIsAStop) {
  ByteTokenizer tokenizer(260);
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kCompletions;
  OpenAiResponse response(request, "cmpl-1", 100, "m", tokenizer);
  GenerationResult result;
  result.reason = FinishReason::kConstraintComplete;
  result.text = "{}";
  ASSERT_TRUE(response.EndChoice(0, result));
  const json whole = json::parse(response.Finish());
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
}

}  // namespace
}  // namespace linserve
