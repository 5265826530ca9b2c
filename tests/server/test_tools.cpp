// Tool calls through the server on the embedded model (ChatML without tools: minfer writes them into
// the system message in the Hermes format) and on the Qwen3 mini (its template renders them): a forced
// call is a call of an offered function whose arguments match its parameters schema, streamed in pieces
// that add up to the whole answer, with finish_reason "tool_calls"; a conversation holding earlier calls
// and their results renders; mistakes are 400s naming the field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "server_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

using nlohmann::json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
   "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
   "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100},
   "b": {"type": "integer", "minimum": -100, "maximum": 100}}, "required": ["a", "b"],
   "additionalProperties": false}}}])";

std::string request(const std::string& tool_choice, bool stream, const std::string& extra = "") {
    return R"({"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": )" +
           std::string(kTools) + R"(, "tool_choice": )" + tool_choice +
           R"(, "temperature": 0, "max_tokens": 200, "stream": )" + (stream ? "true" : "false") + extra + "}";
}

// The message a client assembles from a streamed answer's deltas.
json assemble(const std::string& body, std::string& finish) {
    bool done = false;
    json msg = {{"content", ""}, {"tool_calls", json::array()}};
    for (const json& e : sse_events(body, done)) {
        const json& c = e["choices"][0];
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
        const json& d = c["delta"];
        if (d.contains("content") && d["content"].is_string())
            msg["content"] = msg["content"].get<std::string>() + d["content"].get<std::string>();
        for (const json& t : d.value("tool_calls", json::array())) {
            const size_t i = t["index"];
            if (i == msg["tool_calls"].size()) {
                EXPECT_TRUE(t.contains("id")) << "the first piece of a call has its id: " << t;
                msg["tool_calls"].push_back(
                    {{"id", t["id"]},
                     {"type", t["type"]},
                     {"function", {{"name", t["function"]["name"]}, {"arguments", ""}}}});
            }
            json& f = msg["tool_calls"][i]["function"];
            f["arguments"] =
                f["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
        }
    }
    EXPECT_TRUE(done);
    return msg;
}

void expect_weather_call(const json& call) {
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << call;
    EXPECT_EQ(call["function"]["name"], "get_weather") << call;
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << call;
    EXPECT_TRUE(args["city"].is_string()) << args;
    EXPECT_LE(args["city"].get<std::string>().size(), 24u * 4) << args;
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
    EXPECT_EQ(args.size(), 2u) << args;
}

void named_call_whole_and_streamed(const TestServer& s, const std::string& extra) {
    auto c = s.client();
    const std::string named = R"({"type": "function", "function": {"name": "get_weather"}})";
    const auto whole = c->Post("/v1/chat/completions", request(named, false, extra), "application/json");
    ASSERT_EQ(whole->status, 200) << whole->body;
    const json choice = body_json(whole)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice;
    EXPECT_TRUE(choice["message"]["content"].is_null()) << choice;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
    expect_weather_call(choice["message"]["tool_calls"][0]);

    const auto streamed = c->Post("/v1/chat/completions", request(named, true, extra), "text/event-stream");
    ASSERT_EQ(streamed->status, 200);
    std::string finish;
    const json msg = assemble(streamed->body, finish);
    EXPECT_EQ(finish, "tool_calls");
    EXPECT_EQ(msg["content"], "");
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    EXPECT_EQ(msg["tool_calls"][0]["function"], choice["message"]["tool_calls"][0]["function"]);
}

TEST(Tools, ANamedCallMatchesItsSchemaWholeAndStreamed) {
    TestServer s;
    named_call_whole_and_streamed(s, "");
}

TEST(Tools, ANamedCallOnQwen3MiniSkipsTheReasoning) {
    MINFER_REQUIRE_FILE(model_path("qwen3-mini-Q8_0.gguf"));
    TestServer s({}, test_engine_params(8), model_path("qwen3-mini-Q8_0.gguf"));
    named_call_whole_and_streamed(s, "");
    named_call_whole_and_streamed(s, R"(, "enable_thinking": false)");
}

// The Llama 3.1 template (tests/template/data) on the Llama mini through serve's chat template option:
// the template renders the tools, and calls are the answer's bare JSON object.
TEST(Tools, ANamedCallInLlama3Syntax) {
    MINFER_REQUIRE_FILE(model_path("llama-mini-Q4_K_M.gguf"));
    std::ifstream in(std::string(MINFER_SOURCE_DIR) + "/tests/template/data/llama3.1-instruct.jinja");
    server::ServerOptions o;
    o.chat_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(o.chat_template.empty());
    TestServer s(o, test_engine_params(8), model_path("llama-mini-Q4_K_M.gguf"));
    named_call_whole_and_streamed(s, "");
    const auto t = s.client()->Post("/apply-template", request(R"("auto")", false), "application/json");
    ASSERT_EQ(t->status, 200) << t->body;
    const std::string prompt = body_json(t)["prompt"];
    EXPECT_NE(prompt.find("Environment: ipython"), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("\"get_weather\""), std::string::npos) << prompt;
    EXPECT_EQ(prompt.find("<tool_call>"), std::string::npos) << "the template's own format, not Hermes:\n"
                                                             << prompt;
}

TEST(Tools, RequiredCallsAnOfferedTool) {
    TestServer s;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
        const auto r = s.client()->Post(
            "/v1/chat/completions",
            request(R"("required")", false, R"(, "temperature": 0.9, "seed": )" + std::to_string(seed)),
            "application/json");
        ASSERT_EQ(r->status, 200) << r->body;
        const json choice = body_json(r)["choices"][0];
        ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
        const json& f = choice["message"]["tool_calls"][0]["function"];
        const json args = json::parse(f["arguments"].get<std::string>(), nullptr, false);
        if (f["name"] == "add") {
            ASSERT_TRUE(args["a"].is_number_integer() && args["b"].is_number_integer()) << f;
            EXPECT_LE(std::abs(args["a"].get<int>()), 100);
        } else {
            expect_weather_call(choice["message"]["tool_calls"][0]);
        }
    }
}

TEST(Tools, AConversationWithCallsAndResultsRenders) {
    TestServer s;
    const std::string body = R"({"messages": [
        {"role": "user", "content": "Weather in Paris and in Zürich?"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}},
          {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12 C"}],
      "tools": )" + std::string(kTools) +
                             R"(, "max_tokens": 8, "temperature": 0})";
    auto c = s.client();
    const auto r = c->Post("/v1/chat/completions", body, "application/json");
    ASSERT_EQ(r->status, 200) << r->body;
    const auto t = c->Post("/apply-template", body, "application/json");
    ASSERT_EQ(t->status, 200) << t->body;
    const std::string prompt = body_json(t)["prompt"];
    for (const char* part :
         {"<tools>", "\"name\": \"get_weather\"", "<tool_call>", "Zürich", "<tool_response>\n18 C"})
        EXPECT_NE(prompt.find(part), std::string::npos) << part << " not in:\n" << prompt;
}

TEST(Tools, MistakesAre400sNamingTheField) {
    TestServer s;
    auto c = s.client();
    struct Case {
        std::string body, code, names;
    };
    const std::vector<Case> cases = {
        {request(R"({"type": "function", "function": {"name": "nope"}})", false), "unknown_tool",
         "tool_choice"},
        {request(R"("sometimes")", false), "invalid_value", "tool_choice"},
        {R"({"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]})",
         "invalid_tool_call_id", "messages[0].tool_call_id"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
         "invalid_value", "tools[0].function.name"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "invalid_value",
         "tools"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
           "parameters": {"type": "object", "patternProperties": {"a": {}}}}}], "tool_choice": "required"})",
         "invalid_schema", "patternProperties"},
    };
    for (const Case& k : cases) {
        const auto r = c->Post("/v1/chat/completions", k.body, "application/json");
        ASSERT_EQ(r->status, 400) << k.body;
        const json e = body_json(r)["error"];
        EXPECT_EQ(e["code"], k.code) << e;
        EXPECT_NE(e["message"].get<std::string>().find(k.names), std::string::npos) << e;
    }
}

}  // namespace
}  // namespace minfer::test
