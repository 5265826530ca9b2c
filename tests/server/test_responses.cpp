// POST /v1/responses on the embedded model: a whole response says what the same conversation asked of
// /v1/chat/completions says (prompt tokens, greedy text, cut short -> "incomplete"); a streamed one is
// named events (`event:` = data.type) numbered in order, whose deltas add up to the whole response; a
// forced function call is a function_call item whose arguments match the tool's schema, streamed too; a
// conversation with function_call and function_call_output items renders as chat's tool calls and
// results do; text.format json_schema gives JSON of the schema; mistakes are 400s naming the field as
// the Responses request spells it. The stream writer alone, on the parts a thinking model's answer
// gives (the embedded model does not think): reasoning, message and call items in order, the final
// response the whole one; an empty answer still has its message; an engine failure is response.failed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/responses_render.h"
#include "server_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;  // bodies keep their key order, as templates print tools

const char* kWeather = R"({"type": "function", "name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
  "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false},
  "strict": true})";

httplib::Result post(const TestServer& s, const std::string& path, const ordered& body) {
    return s.client()->Post(path, body.dump(), "application/json");
}

ordered greedy(ordered body) {
    body["model"] = "mini";
    body["temperature"] = 0;
    return body;
}

struct Event {
    std::string name;
    json data;
};

// The events of a streamed response: each `event: NAME` line and the `data:` line after it.
std::vector<Event> events(const std::string& body) {
    std::vector<Event> out;
    std::istringstream in(body);
    std::string name;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("event: ", 0) == 0) name = line.substr(7);
        if (line.rfind("data: ", 0) != 0) continue;
        EXPECT_NE(line, "data: [DONE]") << "the Responses API sends no [DONE]";
        out.push_back({std::exchange(name, {}), json::parse(line.substr(6))});
    }
    return out;
}

// The events' names in order, each checked against its data's type and numbered from 0.
std::vector<std::string> checked_names(const std::vector<Event>& ev) {
    std::vector<std::string> names;
    for (size_t i = 0; i < ev.size(); ++i) {
        EXPECT_EQ(ev[i].name, ev[i].data["type"]) << ev[i].data;
        EXPECT_EQ(ev[i].data["sequence_number"], i) << ev[i].data;
        names.push_back(ev[i].name);
    }
    return names;
}

// The text of the response's message items.
std::string output_text(const json& response) {
    std::string out;
    for (const json& item : response["output"])
        if (item["type"] == "message")
            for (const json& part : item["content"]) out += part["text"].get<std::string>();
    return out;
}

void expect_usage_adds_up(const json& r) {
    const json& u = r["usage"];
    EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int64_t>() + u["output_tokens"].get<int64_t>()) << u;
    EXPECT_TRUE(u["input_tokens_details"]["cached_tokens"].is_number_integer()) << u;
    EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0) << u;  // the embedded model does not think
}

TEST(Responses, AWholeResponseSaysWhatChatSays) {
    TestServer s;
    const json body =
        greedy({{"instructions", "Be brief."}, {"input", "Hello there"}, {"max_output_tokens", 8}});
    const auto r = post(s, "/v1/responses", body);
    ASSERT_EQ(r->status, 200) << r->body;
    const json resp = body_json(r);
    EXPECT_EQ(resp["object"], "response");
    EXPECT_EQ(resp["id"].get<std::string>().rfind("resp_", 0), 0u) << resp;
    EXPECT_EQ(resp["model"], "mini");
    EXPECT_EQ(resp["max_output_tokens"], 8);
    EXPECT_EQ(resp["instructions"], "Be brief.");
    EXPECT_EQ(resp["tool_choice"], "auto");
    EXPECT_EQ(resp["text"]["format"]["type"], "text");
    EXPECT_EQ(resp["store"], false);
    ASSERT_EQ(resp["output"].size(), 1u) << resp;
    const json& msg = resp["output"][0];
    EXPECT_EQ(msg["type"], "message");
    EXPECT_EQ(msg["role"], "assistant");
    EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u) << msg;
    EXPECT_EQ(msg["content"][0]["type"], "output_text");
    EXPECT_TRUE(msg["content"][0]["annotations"].is_array());
    expect_usage_adds_up(resp);

    const json chat = body_json(post(s, "/v1/chat/completions",
                                     greedy({{"messages",
                                              {{{"role", "system"}, {"content", "Be brief."}},
                                               {{"role", "user"}, {"content", "Hello there"}}}},
                                             {"max_tokens", 8}})));
    EXPECT_EQ(output_text(resp), chat["choices"][0]["message"]["content"]);
    EXPECT_EQ(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    EXPECT_EQ(resp["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
    const bool cut = chat["choices"][0]["finish_reason"] == "length";
    EXPECT_EQ(resp["status"], cut ? "incomplete" : "completed") << resp;
    EXPECT_EQ(msg["status"], cut ? "incomplete" : "completed") << resp;
    const json details = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
    EXPECT_EQ(resp["incomplete_details"], details) << resp;
}

TEST(Responses, StreamedEventsAddUpToTheWholeResponse) {
    TestServer s;
    const json body = greedy({{"input", json::array({{{"role", "user"}, {"content", "Tell me a story"}}})},
                              {"max_output_tokens", 12}});
    const json whole = body_json(post(s, "/v1/responses", body));
    json streamed_body = body;
    streamed_body["stream"] = true;
    const auto r = post(s, "/responses", streamed_body);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
    const std::vector<Event> ev = events(r->body);
    const std::vector<std::string> names = checked_names(ev);
    ASSERT_GE(names.size(), 8u) << r->body;
    const std::string last = whole["status"] == "completed" ? "response.completed" : "response.incomplete";
    const std::vector<std::string> head = {"response.created", "response.in_progress",
                                           "response.output_item.added", "response.content_part.added"};
    const std::vector<std::string> tail = {"response.output_text.done", "response.content_part.done",
                                           "response.output_item.done", last};
    EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 4), head);
    EXPECT_EQ(std::vector<std::string>(names.end() - 4, names.end()), tail);
    std::string text;
    for (size_t i = 4; i + 4 < ev.size(); ++i) {
        EXPECT_EQ(names[i], "response.output_text.delta");
        EXPECT_EQ(ev[i].data["item_id"], ev[2].data["item"]["id"]);
        EXPECT_EQ(ev[i].data["output_index"], 0);
        EXPECT_EQ(ev[i].data["content_index"], 0);
        text += ev[i].data["delta"].get<std::string>();
    }
    EXPECT_EQ(ev[0].data["response"]["status"], "in_progress");
    EXPECT_EQ(ev[2].data["item"]["status"], "in_progress");
    EXPECT_EQ(text, output_text(whole));
    EXPECT_EQ(ev.end()[-4].data["text"], text);
    EXPECT_EQ(ev.end()[-2].data["item"]["content"][0]["text"], text);
    const json& final = ev.back().data["response"];
    EXPECT_EQ(final["status"], whole["status"]);
    EXPECT_EQ(output_text(final), text);
    EXPECT_EQ(final["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    EXPECT_EQ(final["id"], ev[0].data["response"]["id"]);
}

void expect_weather_call(const json& item) {
    EXPECT_EQ(item["type"], "function_call") << item;
    EXPECT_EQ(item["id"].get<std::string>().rfind("fc_", 0), 0u) << item;
    EXPECT_EQ(item["call_id"].get<std::string>().rfind("call_", 0), 0u) << item;
    EXPECT_EQ(item["name"], "get_weather") << item;
    EXPECT_EQ(item["status"], "completed") << item;
    const json args = json::parse(item["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << item;
    EXPECT_TRUE(args["city"].is_string()) << args;
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
    EXPECT_EQ(args.size(), 2u) << args;
}

TEST(Responses, AForcedFunctionCallMatchesItsSchemaWholeAndStreamed) {
    TestServer s;
    const json body = greedy({{"input", "What is the weather in Paris?"},
                              {"tools", json::array({json::parse(kWeather)})},
                              {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                              {"max_output_tokens", 200}});
    const json whole = body_json(post(s, "/v1/responses", body));
    EXPECT_EQ(whole["status"], "completed") << whole;
    ASSERT_EQ(whole["output"].size(), 1u) << whole;
    expect_weather_call(whole["output"][0]);
    EXPECT_EQ(whole["tools"][0]["name"], "get_weather");
    EXPECT_EQ(whole["tool_choice"]["name"], "get_weather");

    json streamed_body = body;
    streamed_body["stream"] = true;
    const std::vector<Event> ev = events(post(s, "/v1/responses", streamed_body)->body);
    const std::vector<std::string> names = checked_names(ev);
    ASSERT_GE(names.size(), 6u);
    EXPECT_EQ(names[2], "response.output_item.added");
    EXPECT_EQ(ev[2].data["item"]["type"], "function_call");
    EXPECT_EQ(ev[2].data["item"]["name"], "get_weather");
    std::string args;
    for (const Event& e : ev)
        if (e.name == "response.function_call_arguments.delta") args += e.data["delta"].get<std::string>();
    EXPECT_EQ(args, whole["output"][0]["arguments"]);
    EXPECT_EQ(names.end()[-3], "response.function_call_arguments.done");
    EXPECT_EQ(ev.end()[-3].data["arguments"], args);
    EXPECT_EQ(names.end()[-2], "response.output_item.done");
    EXPECT_EQ(names.back(), "response.completed");
    const json& final = ev.back().data["response"];
    ASSERT_EQ(final["output"].size(), 1u) << final;
    expect_weather_call(final["output"][0]);
}

TEST(Responses, AConversationWithCallsAndTheirOutputsRendersAsChatDoes) {
    TestServer s;
    const std::string args = R"({"city": "Paris", "unit": "celsius"})";
    const ordered input = ordered::array(
        {{{"type", "message"},
          {"role", "user"},
          {"content", {{{"type", "input_text"}, {"text", "Weather in Paris?"}}}}},
         {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", ordered::array()}},
         {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"}, {"arguments", args}},
         {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "18 C"}},
         {{"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "It is 18 C."}}}}},
         {{"role", "developer"}, {"content", "Answer in French."}},
         {{"role", "user"}, {"content", "And tomorrow?"}}});
    const ordered tools = ordered::array({ordered::parse(kWeather)});
    const auto r =
        post(s, "/v1/responses", greedy({{"input", input}, {"tools", tools}, {"max_output_tokens", 8}}));
    ASSERT_EQ(r->status, 200) << r->body;
    const json resp = body_json(r);

    ordered chat_tool = ordered::parse(kWeather);
    chat_tool.erase("type");
    const ordered messages =
        ordered::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                        {{"role", "assistant"},
                         {"content", nullptr},
                         {"tool_calls",
                          {{{"id", "call_1"},
                            {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}},
                        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}},
                        {{"role", "assistant"}, {"content", "It is 18 C."}},
                        {{"role", "system"}, {"content", "Answer in French."}},
                        {{"role", "user"}, {"content", "And tomorrow?"}}});
    const json chat = body_json(post(s, "/v1/chat/completions",
                                     greedy({{"messages", messages},
                                             {"tools", {{{"type", "function"}, {"function", chat_tool}}}},
                                             {"max_tokens", 8}})));
    EXPECT_EQ(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]) << resp;
    const json& m = chat["choices"][0]["message"];
    EXPECT_EQ(output_text(resp), m["content"].is_string() ? m["content"].get<std::string>() : "") << resp;
}

TEST(Responses, AJsonSchemaFormatGivesJsonOfTheSchema) {
    TestServer s;
    const json schema = json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 16}, "count": {"type": "integer", "minimum": 0, "maximum": 999},
        "ok": {"type": "boolean"}}, "required": ["name", "count", "ok"], "additionalProperties": false})");
    const json body = greedy(
        {{"input", "Describe a city as JSON."},
         {"text",
          {{"format", {{"type", "json_schema"}, {"name", "city"}, {"schema", schema}, {"strict", true}}}}},
         {"max_output_tokens", 120}});
    const json resp = body_json(post(s, "/v1/responses", body));
    ASSERT_EQ(resp["status"], "completed") << resp;
    EXPECT_EQ(resp["text"]["format"]["name"], "city");
    const json v = json::parse(output_text(resp), nullptr, false);
    ASSERT_TRUE(v.is_object()) << resp;
    EXPECT_EQ(v.size(), 3u) << v;
    EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 16 * 4) << v;
    EXPECT_TRUE(v["count"].is_number_integer() && v["count"] >= 0 && v["count"] <= 999) << v;
    EXPECT_TRUE(v["ok"].is_boolean()) << v;
}

TEST(Responses, MistakesAre400sNamingTheField) {
    TestServer s;
    const json call = {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "f"}, {"arguments", "{}"}};
    struct Case {
        json body;
        std::string names, code;
    };
    const std::vector<Case> cases = {
        {{{"input", {{{"type", "image_generation_call"}, {"id", "x"}}}}}, "'input[0].type'", "invalid_value"},
        {{{"input", {call, {{"type", "function_call_output"}, {"call_id", "call_2"}, {"output", "1"}}}}},
         "'input[1].call_id'",
         "invalid_tool_call_id"},
        {{{"input", "x"}, {"previous_response_id", "resp_1"}},
         "'previous_response_id'",
         "unsupported_parameter"},
        {{{"input", "x"}, {"tools", {{{"type", "function"}, {"parameters", json::object()}}}}},
         "'tools[0].name'",
         "invalid_value"},
        {{{"input", "x"}, {"tools", {{{"type", "web_search_preview"}}}}}, "'tools[0].type'", "invalid_value"},
        {{{"input", "x"},
          {"tools", {json::parse(kWeather)}},
          {"tool_choice", {{"type", "function"}, {"name", "g"}}}},
         "'tool_choice.name'",
         "unknown_tool"},
        {{{"input", "x"}, {"max_output_tokens", 0}}, "'max_output_tokens'", "invalid_value"},
        {{{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}}, "'text.format.type'", "invalid_value"},
        {{{"input", "x"},
          {"text",
           {{"format",
             {{"type", "json_schema"},
              {"name", "a"},
              {"schema", {{"type", "object"}, {"patternProperties", {{"a", json::object()}}}}}}}}}},
         "'text.format.schema'",
         "invalid_schema"},
        {{{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "x"}}}}}}}},
         "'input[0].content[0].type'",
         "invalid_value"},
        {{{"input", {{{"role", "wizard"}, {"content", "x"}}}}}, "'input[0].role'", "invalid_value"},
        {{{"input", {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{"}}}}},
         "'input[0].arguments'",
         "invalid_value"},
        {{{"input", 3}}, "'input'", "invalid_type"},
        {{{"instructions", "x"}}, "'input'", "missing_required_parameter"},
        {{{"input", "x"}, {"reasoning", {{"effort", "huge"}}}}, "'reasoning.effort'", "invalid_value"},
        {{{"input", "x"}, {"temperature", 5}}, "'temperature'", "invalid_value"},
    };
    for (const Case& k : cases) {
        const auto r = post(s, "/v1/responses", k.body);
        ASSERT_EQ(r->status, 400) << k.body;
        const json e = body_json(r)["error"];
        EXPECT_EQ(e["type"], "invalid_request_error") << e;
        EXPECT_EQ(e["code"], k.code) << e;
        EXPECT_NE(e["message"].get<std::string>().find(k.names), std::string::npos) << k.names << ": " << e;
    }
}

json without_ids(json output) {
    for (json& item : output) item.erase("id");
    return output;
}

server::ChatDelta delta(std::string reasoning, std::string content,
                        std::vector<server::ToolCallDelta> calls = {}) {
    server::ChatDelta d;
    d.reasoning = std::move(reasoning);
    d.content = std::move(content);
    d.tool_calls = std::move(calls);
    return d;
}

TEST(Responses, TheWriterStreamsReasoningMessageAndCallsInOrder) {
    const server::ResponsesMeta m{"resp_1", "mini", 1, json::object(), nullptr};
    const std::shared_ptr<server::ChatStreamWriter> w = server::responses_stream_writer(m);
    const std::vector<server::ChatDelta> parts = {
        delta("Let me", ""), delta(" think.", "Sure"), delta("", "!", {{0, "call_a", "f", "{\"x\""}}),
        delta("", "", {{0, "", "", ": 1}"}, {1, "call_b", "g", "{}"}})};
    std::string sse = w->begin(5);
    server::ChatAnswer whole;
    for (const server::ChatDelta& d : parts) {
        sse += w->parts(d);
        whole.parts.append(d);
    }
    whole.result.finish = FinishReason::Stop;
    whole.result.ids = {1, 2, 3};
    whole.result.prompt_tokens = 5;
    sse += w->end(whole);
    const std::vector<Event> ev = events(sse);
    const std::vector<std::string> item = {"response.output_item.added", "response.content_part.added"};
    const std::vector<std::string> want = {
        "response.created", "response.in_progress",
        // reasoning
        item[0], item[1], "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        // message
        item[0], item[1], "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        // the calls
        item[0], "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", item[0],
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"};
    EXPECT_EQ(checked_names(ev), want);
    EXPECT_EQ(ev[6].data["text"], "Let me think.");
    EXPECT_EQ(ev[20].data["item"]["arguments"], "{\"x\": 1}");
    EXPECT_EQ(ev[20].data["item"]["call_id"], "call_a");
    const json final = ev.back().data["response"];
    const json direct = server::response_json(m, whole);
    EXPECT_EQ(without_ids(final["output"]), without_ids(direct["output"])) << final << direct;
    EXPECT_EQ(final["usage"], direct["usage"]);
    EXPECT_EQ(direct["output"][0]["content"][0],
              json({{"type", "reasoning_text"}, {"text", "Let me think."}}));
    EXPECT_EQ(direct["output"][1]["content"][0]["text"], "Sure!");
}

TEST(Responses, AnEmptyAnswerHasItsMessageAndAFailureIsResponseFailed) {
    const server::ResponsesMeta m{"resp_1", "mini", 1, json::object(), nullptr};
    auto w = server::responses_stream_writer(m);
    server::ChatAnswer cut;         // nothing said before max_output_tokens
    std::string sse = w->begin(5);  // each call a statement of its own: the writer numbers its events
    sse += w->end(cut);
    const std::vector<Event> ev = events(sse);
    EXPECT_EQ(ev.back().name, "response.incomplete");
    const json direct = server::response_json(m, cut);
    EXPECT_EQ(without_ids(ev.back().data["response"]["output"]), without_ids(direct["output"]));
    ASSERT_EQ(direct["output"].size(), 1u);
    EXPECT_EQ(direct["output"][0]["status"], "incomplete");
    EXPECT_EQ(direct["output"][0]["content"][0]["text"], "");

    w = server::responses_stream_writer(m);
    sse = w->begin(5);
    sse += w->parts(delta("", "Hi"));
    sse += w->fail(server::ApiError(500, "server_error", "engine_failed", "boom"));
    const std::vector<Event> failed = events(sse);
    checked_names(failed);
    EXPECT_EQ(failed.back().name, "response.failed");
    const json& r = failed.back().data["response"];
    EXPECT_EQ(r["status"], "failed");
    EXPECT_EQ(r["error"]["message"], "boom");
    EXPECT_EQ(r["output"][0]["status"], "incomplete");
}

}  // namespace
}  // namespace minfer::test
