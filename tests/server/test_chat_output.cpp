// ChatOutputParser: an answer fed in any split says what it says whole — reasoning, content and tool
// calls — and never lets half a marker or half a call into the content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/request.h"

namespace minfer::server {
namespace {

// A call as a client assembles it from its deltas.
struct Call {
    std::string id, name, arguments;
};

struct Said {
    std::string reasoning, content;
    std::vector<Call> calls;
};

void add(Said& s, const ChatDelta& d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
        if (t.index == s.calls.size()) {
            EXPECT_FALSE(t.id.empty()) << "a call's first piece carries its id";
            EXPECT_FALSE(t.name.empty()) << "a call's first piece carries its name";
            s.calls.push_back({t.id, t.name, ""});
        }
        ASSERT_EQ(t.index + 1, s.calls.size()) << "pieces arrive call after call";
        s.calls.back().arguments += t.arguments;
    }
}

// The answer fed in pieces of `step` bytes (0: whole).
Said parse(const ChatSyntax& syntax, bool tools, const std::string& text, size_t step = 0) {
    ChatOutputParser p(syntax, tools);
    Said s;
    if (step == 0) step = text.size() + 1;
    for (size_t i = 0; i < text.size(); i += step) add(s, p.feed(text.substr(i, step)));
    add(s, p.finish());
    return s;
}

void expect_same(const Said& a, const Said& b, const std::string& why) {
    EXPECT_EQ(a.reasoning, b.reasoning) << why;
    EXPECT_EQ(a.content, b.content) << why;
    ASSERT_EQ(a.calls.size(), b.calls.size()) << why;
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].name, b.calls[i].name) << why;
        const auto x = nlohmann::json::parse(a.calls[i].arguments, nullptr, false);
        const auto y = nlohmann::json::parse(b.calls[i].arguments, nullptr, false);
        if (x.is_discarded() || y.is_discarded())  // cut short: the same bytes
            EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << why;
        else
            EXPECT_EQ(x, y) << why;
    }
}

ChatSyntax qwen3() {
    ChatSyntax s;
    s.think_tags = true;
    s.native_tools = true;
    return s;
}

const std::vector<std::string>& answers() {
    static const std::vector<std::string> a = {
        "Hello there.",
        "<think>\nLet me see.\n\nOK.\n</think>\n\nThe answer is 4.",
        "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": "
        "{\"city\": \"Z\\u00fcrich\", \"days\": [1, 2]}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call>\n<tool_call>\n"
        "{\"name\": \"b_2\", \"arguments\": {}}\n</tool_call>",
        "Let me check. <tool_call>\n{\"arguments\": {\"q\": 1}, \"name\": \"search\"}\n</tool_call>",
        "a < b and <tool> is not <tool_call but text",
        "<tool_call>\nnot json at all\n</tool_call> then words",
        "東京 <think> inside content stays content",
    };
    return a;
}

TEST(ChatOutput, EverySplitSaysWhatTheWholeSays) {
    for (const std::string& text : answers())
        for (bool tools : {false, true}) {
            const Said whole = parse(qwen3(), tools, text);
            for (size_t step = 1; step < 8; ++step)
                expect_same(parse(qwen3(), tools, text, step), whole,
                            "split every " + std::to_string(step) + " bytes of: " + text);
        }
}

TEST(ChatOutput, ReasoningIsSplitFromContent) {
    const Said s = parse(qwen3(), false, answers()[1]);
    EXPECT_EQ(s.reasoning, "Let me see.\n\nOK.");
    EXPECT_EQ(s.content, "The answer is 4.");
    EXPECT_TRUE(s.calls.empty());
}

TEST(ChatOutput, APromptThatOpenedThinkStartsInReasoning) {
    ChatSyntax syntax = qwen3();
    syntax.starts_in_reasoning = true;
    const Said s = parse(syntax, false, "\nplanning\n</think>\n\ndone");
    EXPECT_EQ(s.reasoning, "planning");
    EXPECT_EQ(s.content, "done");
}

TEST(ChatOutput, WithoutThinkTagsAThinkIsContent) {
    ChatSyntax plain;
    const Said s = parse(plain, false, answers()[1]);
    EXPECT_EQ(s.content, answers()[1]);
    EXPECT_TRUE(s.reasoning.empty());
}

TEST(ChatOutput, ToolCallsAreParsedWithTheirArguments) {
    const Said s = parse(qwen3(), true, answers()[2]);
    EXPECT_EQ(s.reasoning, "The user wants weather.");
    EXPECT_EQ(s.content, "");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(s.calls[0].arguments),
              nlohmann::json::parse(R"({"city": "Zürich", "days": [1, 2]})"));
    EXPECT_EQ(s.calls[0].id.rfind("call_", 0), 0u);
    EXPECT_EQ(s.calls[0].id.size(), 29u);
}

TEST(ChatOutput, SeveralCallsInOneTurnEachGetTheirOwnId) {
    const Said s = parse(qwen3(), true, answers()[3], 1);
    ASSERT_EQ(s.calls.size(), 2u);
    EXPECT_EQ(s.calls[0].name, "a");
    EXPECT_EQ(s.calls[0].arguments, R"({"x": "</tool"})");
    EXPECT_EQ(s.calls[1].name, "b_2");
    EXPECT_EQ(s.calls[1].arguments, "{}");
    EXPECT_NE(s.calls[0].id, s.calls[1].id);
    EXPECT_EQ(s.content, "");
}

TEST(ChatOutput, ACallWithKeysInAnotherOrderIsReadWhole) {
    const Said s = parse(qwen3(), true, answers()[4], 3);
    EXPECT_EQ(s.content, "Let me check.");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "search");
    EXPECT_EQ(nlohmann::json::parse(s.calls[0].arguments), nlohmann::json::parse(R"({"q": 1})"));
}

TEST(ChatOutput, TextThatOnlyLooksLikeAMarkerIsContent) {
    for (size_t step : {1, 2, 5, 0}) {
        EXPECT_EQ(parse(qwen3(), true, answers()[5], step).content, answers()[5]);
        EXPECT_EQ(parse(qwen3(), true, "ends with <tool_ca", step).content, "ends with <tool_ca");
    }
}

TEST(ChatOutput, AMalformedCallStaysContentMarkersIncluded) {
    const Said s = parse(qwen3(), true, answers()[6], 2);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.content, answers()[6]);  // verbatim
}

TEST(ChatOutput, WithoutToolsACallIsContent) {
    const Said s = parse(qwen3(), false, answers()[3]);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.content, answers()[3]);
}

TEST(ChatOutput, NoPieceOfContentIsHalfAMarker) {
    ChatOutputParser p(qwen3(), true);
    const std::string text = answers()[4];
    for (char c : text) {
        const ChatDelta d = p.feed(std::string(1, c));
        EXPECT_EQ(d.content.find('<'), std::string::npos) << "content piece: " << d.content;
    }
}

ChatSyntax llama3() {
    ChatSyntax s;
    s.tools = ToolSyntax::Llama3Json;
    s.native_tools = true;
    return s;
}

TEST(ChatOutput, Llama3CallsAreTheAnswersJsonObject) {
    const std::string call =
        R"( {"name": "get_weather", "parameters": {"city": "東京", "n": [1, {"a": "}"}]}})";
    const Said whole = parse(llama3(), true, call);
    ASSERT_EQ(whole.calls.size(), 1u);
    EXPECT_EQ(whole.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(whole.calls[0].arguments),
              nlohmann::json::parse(R"({"city": "東京", "n": [1, {"a": "}"}]})"));
    EXPECT_EQ(whole.content, "");
    const std::vector<std::string> others = {
        call,           R"({"parameters": {}, "name": "f"})", R"({"answer": 42})",
        "plain {text}", R"({"name": "f", "parameters": {"x)", "\n\n"};
    for (const std::string& text : others)
        for (size_t step = 1; step < 6; ++step)
            expect_same(parse(llama3(), true, text, step), parse(llama3(), true, text),
                        "llama3, split: " + text);
    EXPECT_EQ(parse(llama3(), true, R"({"answer": 42})").content, R"({"answer": 42})")
        << "not a call: content";
    EXPECT_EQ(parse(llama3(), true, "plain {text}").content, "plain {text}");
    EXPECT_EQ(parse(llama3(), false, call).content, call) << "no tools offered: content";
    EXPECT_EQ(parse(llama3(), true, R"({"parameters": {}, "name": "f"})").calls.size(), 1u);
}

TEST(ChatOutput, DetectsTheTemplatesSyntax) {
    const ChatSyntax chatml =
        detect_chat_syntax("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}");
    EXPECT_FALSE(chatml.think_tags);
    EXPECT_FALSE(chatml.native_tools);
    const ChatSyntax q = detect_chat_syntax(
        "{% if tools %}<tools>{{ tools }}</tools>{% endif %}<tool_call>{% if enable_thinking %}<think>{% "
        "endif %}");
    EXPECT_TRUE(q.think_tags);
    EXPECT_TRUE(q.native_tools);
    EXPECT_EQ(q.tools, ToolSyntax::Hermes);
    const ChatSyntax l = detect_chat_syntax(
        "{% if tools %}Environment: ipython{% endif %}{\"name\": function name, \"parameters\": dictionary}");
    EXPECT_EQ(l.tools, ToolSyntax::Llama3Json);
    EXPECT_TRUE(l.native_tools);
}

// gpt-oss's harmony format: the channels as the model writes them after the prompt's <|start|>assistant
// (the final <|return|> or <|call|> ends generation and is not in the text).
ChatSyntax harmony() {
    return detect_chat_syntax("{{- '<|start|>system<|message|>' }} ... <|channel|>analysis<|message|>");
}

const std::vector<std::string>& harmony_answers() {
    static const std::vector<std::string> a = {
        "<|channel|>analysis<|message|>User asks 2+2. "
        "Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
        "2 + 2 = 4.",
        "<|channel|>analysis<|message|>Need weather: call the "
        "tool.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Z\u00fcrich\", \"x\": \"<|\"}",
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant "
        "to=functions.lookup<|channel|>commentary "
        "json<|message|>{\"q\": 1}",
        "<|channel|>commentary<|message|>Let me "
        "check.<|end|><|start|>assistant<|channel|>final<|message|>Done.",
        "No channels at all, a < b.",
        "<|channel|>final<|message|>Only the answer.",
    };
    return a;
}

TEST(Harmony, TemplateWithChannelsIsDetected) {
    const ChatSyntax s = harmony();
    EXPECT_EQ(s.tools, ToolSyntax::Harmony);
    EXPECT_TRUE(s.native_tools);
    EXPECT_FALSE(s.think_tags);
}

TEST(Harmony, EverySplitSaysWhatTheWholeSays) {
    for (const std::string& text : harmony_answers())
        for (bool tools : {false, true}) {
            const Said whole = parse(harmony(), tools, text);
            if (tools) {
                EXPECT_EQ(whole.content.find("<|"), std::string::npos) << text;  // no markers said
            }
            EXPECT_EQ(whole.reasoning.find("<|"), std::string::npos) << text;
            for (size_t step = 1; step < 9; ++step)
                expect_same(parse(harmony(), tools, text, step), whole,
                            "split every " + std::to_string(step) + " bytes of: " + text);
        }
}

TEST(Harmony, ChannelsGoWhereAgentsReadThem) {
    const Said a = parse(harmony(), false, harmony_answers()[0]);
    EXPECT_EQ(a.reasoning, "User asks 2+2. Easy.");
    EXPECT_EQ(a.content, "2 + 2 = 4.");
    EXPECT_TRUE(a.calls.empty());

    const Said b = parse(harmony(), true, harmony_answers()[1]);
    EXPECT_EQ(b.reasoning, "Need weather: call the tool.");
    EXPECT_EQ(b.content, "");
    ASSERT_EQ(b.calls.size(), 1u);
    EXPECT_EQ(b.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(b.calls[0].arguments),
              nlohmann::json::parse(R"({"city": "Zürich", "x": "<|"})"));

    const Said c = parse(harmony(), true, harmony_answers()[2]);
    ASSERT_EQ(c.calls.size(), 1u);
    EXPECT_EQ(c.calls[0].name, "lookup");  // the recipient in the role's header
    EXPECT_EQ(c.calls[0].arguments, "{\"q\": 1}");

    const Said d = parse(harmony(), true, harmony_answers()[3]);
    EXPECT_EQ(d.content, "Let me check.Done.");  // a preamble without a recipient is content

    EXPECT_EQ(parse(harmony(), true, harmony_answers()[4]).content, "No channels at all, a < b.");
    const Said f = parse(harmony(), false, harmony_answers()[1]);
    EXPECT_TRUE(f.calls.empty()) << "no tools offered: the call's text is content";
}

// An assistant turn's reasoning, however the client names it, reaches the template both as
// reasoning_content (Qwen3's templates) and as thinking (gpt-oss's).
TEST(Harmony, ReasoningReachesTemplatesUnderBothNames) {
    for (const char* key : {"reasoning_content", "reasoning", "thinking"}) {
        nlohmann::ordered_json body = {{"messages",
                                        {{{"role", "user"}, {"content", "Hi"}},
                                         {{"role", "assistant"}, {"content", nullptr}, {key, "Greet back."}},
                                         {{"role", "user"}, {"content", "Again"}}}}};
        const CompletionRequest r = parse_completion_request(body.dump(), Endpoint::Chat, ParseLimits{});
        const auto& m = r.messages[1];
        EXPECT_EQ(m["reasoning_content"], "Greet back.") << key;
        EXPECT_EQ(m["thinking"], "Greet back.") << key;
        EXPECT_EQ(m["content"], "") << "a null content renders as empty text";
    }
}

// OpenAI's reasoning_effort reaches the template as reasoning_effort (gpt-oss reads it) and turns a
// thinking template's reasoning on or off ("none"); anything else is a 400.
TEST(Harmony, ReasoningEffortIsATemplateVariable) {
    const auto kwargs = [](const nlohmann::ordered_json& effort) {
        const nlohmann::ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                             {"reasoning_effort", effort}};
        return parse_completion_request(body.dump(), Endpoint::Chat, ParseLimits{}).template_kwargs;
    };
    EXPECT_EQ(kwargs("high")["reasoning_effort"], "high");
    EXPECT_EQ(kwargs("high")["enable_thinking"], true);
    EXPECT_EQ(kwargs("none")["enable_thinking"], false);
    EXPECT_THROW(kwargs("extreme"), ApiError);
    EXPECT_THROW(kwargs(3), ApiError);
}

}  // namespace
}  // namespace minfer::server
