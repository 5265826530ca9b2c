// POST /v1/messages (Anthropic's Messages API) on the embedded model: the whole message and its events
// in the documented order (text deltas adding up to the whole text), a forced tool_use whose input
// matches its schema, stop sequences, a conversation of tool_use and tool_result blocks prompting as the
// same conversation does on /v1/chat/completions, x-api-key auth, and mistakes as 400s naming the field
// in Anthropic's error envelope.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

const char* kTools = R"([
  {"name": "get_weather", "description": "Weather of a city", "input_schema": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 24}, "unit": {"enum": ["celsius", "fahrenheit"]}},
   "required": ["city", "unit"], "additionalProperties": false}}])";

json post(const TestServer& s, const json& body, int status = 200) {
    const auto r = s.client()->Post("/v1/messages", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, status) << r->body;
    return body_json(r);
}

json hello(int max_tokens = 8) {
    return {{"model", "mini"},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"system", "Be brief."},
            {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};
}

json weather_call(bool stream) {
    json b = {{"model", "mini"},
              {"max_tokens", 200},
              {"temperature", 0},
              {"stream", stream},
              {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
              {"tools", json::parse(kTools)},
              {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}};
    return b;
}

struct Event {
    std::string name;
    json data;
};

// The stream's events: each "event: NAME" line and the JSON of the "data:" line after it.
std::vector<Event> events_of(const std::string& body) {
    std::vector<Event> out;
    std::istringstream in(body);
    std::string name;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("event: ", 0) == 0) name = line.substr(7);
        if (line.rfind("data: ", 0) != 0) continue;
        EXPECT_FALSE(name.empty()) << "data without an event line: " << line;
        out.push_back({std::exchange(name, {}), json::parse(line.substr(6))});
    }
    return out;
}

// The message a client assembles from the events, checking their order on the way: message_start,
// then per block content_block_start, deltas, content_block_stop, then message_delta, message_stop.
json assemble(const std::vector<Event>& events) {
    EXPECT_GE(events.size(), 3u);
    if (events.size() < 3) return nullptr;
    for (const Event& e : events) EXPECT_EQ(e.data["type"], e.name) << e.data;
    EXPECT_EQ(events.front().name, "message_start");
    json msg = events.front().data["message"];
    EXPECT_EQ(msg["content"], json::array());
    std::vector<std::string> partial;  // per block: its input_json_delta pieces
    bool open = false;
    for (size_t i = 1; i + 2 < events.size(); ++i) {
        const json& d = events[i].data;
        const std::string& name = events[i].name;
        if (name == "content_block_start") {
            EXPECT_FALSE(open) << "a block opened before the last one stopped";
            EXPECT_EQ(d["index"], msg["content"].size());
            msg["content"].push_back(d["content_block"]);
            partial.emplace_back();
            open = true;
            continue;
        }
        if (!open) {
            ADD_FAILURE() << name << " outside a block";
            return nullptr;
        }
        EXPECT_EQ(d["index"], msg["content"].size() - 1);
        if (name == "content_block_stop") {
            open = false;
            continue;
        }
        EXPECT_EQ(name, "content_block_delta");
        json& b = msg["content"].back();
        const json& delta = d["delta"];
        if (delta["type"] == "text_delta")
            b["text"] = b["text"].get<std::string>() + delta["text"].get<std::string>();
        if (delta["type"] == "thinking_delta")
            b["thinking"] = b["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
        if (delta["type"] == "input_json_delta") {
            partial.back() += delta["partial_json"].get<std::string>();
            b["input"] = json::parse(partial.back(), nullptr, false);
        }
    }
    EXPECT_FALSE(open);
    const Event& last_delta = events[events.size() - 2];
    EXPECT_EQ(last_delta.name, "message_delta");
    for (const char* k : {"stop_reason", "stop_sequence"}) msg[k] = last_delta.data["delta"][k];
    msg["usage"]["output_tokens"] = last_delta.data["usage"]["output_tokens"];
    EXPECT_EQ(events.back().name, "message_stop");
    return msg;
}

std::vector<Event> stream(const TestServer& s, json body) {
    body["stream"] = true;
    const auto r = s.client()->Post("/v1/messages", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    return events_of(r->body);
}

std::string text_of(const json& msg) {
    std::string out;
    for (const json& b : msg["content"])
        if (b["type"] == "text") out += b["text"].get<std::string>();
    return out;
}

TEST(Messages, WholeMessage) {
    TestServer s;
    const json m = post(s, hello());
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["model"], "mini");
    EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u) << m;
    ASSERT_EQ(m["content"].size(), 1u) << m;
    EXPECT_EQ(m["content"][0]["type"], "text");
    EXPECT_FALSE(m["content"][0]["text"].get<std::string>().empty());
    EXPECT_TRUE(m["stop_sequence"].is_null());
    EXPECT_GT(m["usage"]["input_tokens"].get<int>(), 0);
    EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 0);  // the first request: nothing cached yet
    if (m["stop_reason"] == "max_tokens")
        EXPECT_EQ(m["usage"]["output_tokens"], 8);
    else
        EXPECT_EQ(m["stop_reason"], "end_turn") << m;
}

TEST(Messages, StreamedEventsAddUpToTheWholeMessage) {
    TestServer s;
    const json whole = post(s, hello(24));
    const std::vector<Event> events = stream(s, hello(24));
    const json msg = assemble(events);
    EXPECT_EQ(text_of(msg), text_of(whole));
    EXPECT_EQ(msg["content"], whole["content"]);
    EXPECT_EQ(msg["stop_reason"], whole["stop_reason"]);
    EXPECT_EQ(msg["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(msg["usage"]["output_tokens"], events[events.size() - 2].data["usage"]["output_tokens"]);
}

void expect_weather_input(const json& block) {
    EXPECT_EQ(block["type"], "tool_use") << block;
    EXPECT_EQ(block["id"].get<std::string>().rfind("toolu_", 0), 0u) << block;
    EXPECT_EQ(block["name"], "get_weather") << block;
    const json& in = block["input"];
    ASSERT_TRUE(in.is_object()) << block;
    EXPECT_TRUE(in["city"].is_string()) << in;
    EXPECT_TRUE(in["unit"] == "celsius" || in["unit"] == "fahrenheit") << in;
    EXPECT_EQ(in.size(), 2u) << in;
}

TEST(Messages, ANamedToolGivesAToolUseBlockWholeAndStreamed) {
    TestServer s;
    for (const bool parallel : {true, false}) {
        json body = weather_call(false);
        body["tool_choice"]["disable_parallel_tool_use"] = !parallel;
        const json m = post(s, body);
        EXPECT_EQ(m["stop_reason"], "tool_use") << m;
        ASSERT_EQ(m["content"].size(), 1u) << m;
        expect_weather_input(m["content"][0]);
        const json msg = assemble(stream(s, body));
        EXPECT_EQ(msg["stop_reason"], "tool_use");
        ASSERT_EQ(msg["content"].size(), 1u) << msg;
        expect_weather_input(msg["content"][0]);
        EXPECT_EQ(msg["content"][0]["input"], m["content"][0]["input"]);
    }
}

TEST(Messages, StopSequences) {
    TestServer s;
    const std::string full = text_of(post(s, hello(24)));
    size_t at = 2;  // three ASCII bytes that are not at the start
    while (at + 3 < full.size() && !(isalnum(static_cast<unsigned char>(full[at])) &&
                                     isalnum(static_cast<unsigned char>(full[at + 1])) &&
                                     isalnum(static_cast<unsigned char>(full[at + 2]))))
        ++at;
    ASSERT_LT(at + 3, full.size()) << full;
    const std::string stop = full.substr(at, 3);
    json body = hello(24);
    body["stop_sequences"] = {"\x01none", stop};
    const json m = post(s, body);
    EXPECT_EQ(m["stop_reason"], "stop_sequence") << m;
    EXPECT_EQ(m["stop_sequence"], stop);
    EXPECT_EQ(text_of(m), full.substr(0, full.find(stop)));
    const json msg = assemble(stream(s, body));
    EXPECT_EQ(msg["stop_reason"], "stop_sequence");
    EXPECT_EQ(msg["stop_sequence"], stop);
}

// The same conversation as Anthropic blocks and as chat messages answers the same at temperature 0:
// system first, tool_use as tool_calls (toolu_X read as call_X), each tool_result a tool message.
TEST(Messages, AToolConversationPromptsAsTheChatRouteDoes) {
    TestServer s;
    const json call = post(s, weather_call(false))["content"][0];
    const std::string id = call["id"];
    const json anthropic = {{"model", "mini"},
                            {"max_tokens", 12},
                            {"temperature", 0},
                            {"system", {{{"type", "text"}, {"text", "Be brief."}}}},
                            {"tools", json::parse(kTools)},
                            {"messages",
                             {{{"role", "user"}, {"content", "What is the weather in Paris?"}},
                              {{"role", "assistant"},
                               {"content",
                                {{{"type", "thinking"}, {"thinking", "Ask the tool."}, {"signature", ""}},
                                 {{"type", "text"}, {"text", "Let me look."}},
                                 call}}},
                              {{"role", "user"},
                               {"content",
                                {{{"type", "tool_result"},
                                  {"tool_use_id", id},
                                  {"content", {{{"type", "text"}, {"text", "18 C"}}}}},
                                 {{"type", "text"}, {"text", "And tomorrow?"}}}}}}}};
    const json m = post(s, anthropic);
    json chat = {{"model", "mini"},
                 {"max_tokens", 12},
                 {"temperature", 0},
                 {"tools", {{{"type", "function"}, {"function", json::parse(kTools)[0]}}}},
                 {"messages",
                  {{{"role", "system"}, {"content", "Be brief."}},
                   {{"role", "user"}, {"content", "What is the weather in Paris?"}},
                   {{"role", "assistant"},
                    {"content", "Let me look."},
                    {"reasoning_content", "Ask the tool."},
                    {"tool_calls",
                     {{{"id", "call_" + id.substr(6)},
                       {"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", call["input"].dump()}}}}}}},
                   {{"role", "tool"}, {"tool_call_id", "call_" + id.substr(6)}, {"content", "18 C"}},
                   {{"role", "user"}, {"content", "And tomorrow?"}}}}};
    json& fn = chat["tools"][0]["function"];
    fn["parameters"] = fn["input_schema"];
    fn.erase("input_schema");
    const auto r = s.client()->Post("/v1/chat/completions", chat.dump(), "application/json");
    ASSERT_EQ(r->status, 200) << r->body;
    const json choice = body_json(r)["choices"][0]["message"];
    EXPECT_EQ(text_of(m), choice["content"].is_string() ? choice["content"].get<std::string>() : "") << m;

    json again = anthropic;  // the id as the parser spells it is read the same
    again["messages"][1]["content"][2]["id"] = "call_" + id.substr(6);
    again["messages"][2]["content"][0]["tool_use_id"] = "call_" + id.substr(6);
    again["messages"][2]["content"][0]["is_error"] = false;
    EXPECT_EQ(text_of(post(s, again)), text_of(m));
}

TEST(Messages, XApiKeyAuth) {
    TestServer s;
    auto none = s.client(false);
    const auto r = none->Post("/v1/messages", hello().dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    const json e = body_json(r);
    EXPECT_EQ(e["type"], "error") << e;
    EXPECT_EQ(e["error"]["type"], "authentication_error") << e;
    EXPECT_TRUE(e["error"]["message"].is_string()) << e;
    const httplib::Headers wrong{{"x-api-key", "test-key-0123456780"}, {"anthropic-version", "2023-06-01"}};
    EXPECT_EQ(none->Post("/v1/messages", wrong, hello().dump(), "application/json")->status, 401);
    const httplib::Headers right{{"x-api-key", kKey}, {"anthropic-version", "2023-06-01"}};
    const auto ok = none->Post("/v1/messages", right, hello().dump(), "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
    EXPECT_EQ(body_json(ok)["type"], "message");
}

TEST(Messages, MistakesAre400sNamingTheField) {
    TestServer s;
    const json user = {{"role", "user"}, {"content", "Hi"}};
    auto with = [&](const char* key, const json& v) {
        json b = hello();
        b[key] = v;
        return b;
    };
    json no_max = hello();
    no_max.erase("max_tokens");
    json no_model = hello();
    no_model.erase("model");
    const json unknown_result = {
        user,
        {{"role", "assistant"}, {"content", "ok"}},
        {{"role", "user"},
         {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_9"}, {"content", "x"}}}}}};
    const json image = {{{"role", "user"}, {"content", {{{"type", "image"}, {"source", json::object()}}}}}};
    const json tool_in_user = {
        {{"role", "user"},
         {"content", {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "f"}, {"input", json::object()}}}}}};
    const std::vector<std::pair<json, std::string>> cases = {
        {no_max, "'max_tokens'"},
        {no_model, "'model'"},
        {with("max_tokens", 0), "'max_tokens'"},
        {with("messages", unknown_result), "'messages[2].content[0].tool_use_id'"},
        {with("messages", image), "'messages[0].content[0].type'"},
        {with("messages", tool_in_user), "'messages[0].content[0].type'"},
        {with("messages", {{{"role", "system"}, {"content", "x"}}}), "'messages[0].role'"},
        {with("messages", json::array()), "'messages'"},
        {with("system", 7), "'system'"},
        {with("temperature", 1.5), "'temperature'"},
        {with("top_k", -1), "'top_k'"},
        {with("stop_sequences", {""}), "'stop_sequences[0]'"},
        {with("tools", {{{"name", "f"}}}), "'tools[0].input_schema'"},
        {with("tools", {{{"name", "a b"}, {"input_schema", {{"type", "object"}}}}}), "'tools[0].name'"},
        {with("tools", {{{"type", "bash_20250124"}, {"name", "bash"}}}), "'tools[0].type'"},
        {with("tool_choice", {{"type", "tool"}, {"name", "nope"}}), "'tool_choice.name'"},
        {with("tool_choice", {{"type", "sometimes"}}), "'tool_choice.type'"},
        {with("thinking", {{"type", "enabled"}}), "'thinking.budget_tokens'"},
    };
    for (const auto& [body, names] : cases) {
        const json e = post(s, body, 400);
        EXPECT_EQ(e["type"], "error") << e;
        EXPECT_EQ(e["error"]["type"], "invalid_request_error") << e;
        EXPECT_NE(e["error"]["message"].get<std::string>().find(names), std::string::npos)
            << names << " not named in " << e;
    }
    const auto bad = s.client()->Post("/v1/messages", "{not json", "application/json");
    EXPECT_EQ(bad->status, 400);
    EXPECT_EQ(body_json(bad)["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace minfer::test
