// A chat answer's text split as agents read it: reasoning (`<think>…</think>`), content, and tool calls
// in the syntax the chat template taught the model (Hermes / Qwen `<tool_call>{json}</tool_call>`, or
// Llama 3.x's bare `{"name": ..., "parameters": ...}` answer). The
// parser takes the text as it streams in and says only what is certain: a suffix that may still become
// a marker is held back, so half a marker or half a call never reaches the content. A streamed answer
// and a whole one go through the same parser, so both say the same.
//
//   ChatOutputParser p(syntax, /*parse_tools=*/true);
//   ChatDelta d = p.feed(text);   // per streamed piece
//   ChatDelta last = p.finish();  // at the end: whatever was held back
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::server {

enum class ToolSyntax {
    Hermes,      // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, as Qwen2.5 and Qwen3 write
    Llama3Json,  // the answer is {"name": ..., "parameters": {...}}, as Llama 3.1-3.3 templates ask
    Harmony      // gpt-oss's channels (HarmonyParser): reasoning, answer and calls are messages of their own
};

// What a model's chat template makes it write (detect_chat_syntax reads the template).
struct ChatSyntax {
    ToolSyntax tools = ToolSyntax::Hermes;
    bool think_tags = false;           // reasoning comes as <think>…</think> at the start of the answer
    bool native_tools = false;         // the template renders `tools` itself (else minfer adds them)
    bool starts_in_reasoning = false;  // the prompt already opened <think>: the answer begins inside it
    // The key under which a call's arguments come, and the text that opens and closes a call.
    const char* arguments_key() const { return tools == ToolSyntax::Hermes ? "arguments" : "parameters"; }
    std::string_view call_open() const { return tools == ToolSyntax::Hermes ? "<tool_call>" : ""; }
    std::string_view call_close() const { return tools == ToolSyntax::Hermes ? "</tool_call>" : ""; }
};
ChatSyntax detect_chat_syntax(const std::string& chat_template);

// A new tool call's id: "call_" and 24 random letters and digits.
std::string make_call_id();

// One tool call's piece: its start carries id and name; arguments arrive in pieces after it.
struct ToolCallDelta {
    size_t index = 0;
    std::string id, name;  // set on the call's first piece only
    std::string arguments;
};

struct ChatDelta {
    std::string reasoning, content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
    void append(ChatDelta d);  // d's pieces after this one's
};

// gpt-oss's harmony answer. After the prompt's `<|start|>assistant` the model writes messages
// `<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY`, each closed by <|end|> (the next
// one then opens with `<|start|>assistant`, whose header may carry the ` to=RECIPIENT`), <|return|> (the
// answer's end) or <|call|> (a call's end); the control tokens reach the parser as text. Channel
// analysis is reasoning, final the content, commentary to=functions.NAME a call of NAME whose body is
// its arguments (other commentary, a preamble, is content). Text before any header is content. As
// ChatOutputParser, it holds back a suffix that may still become a marker.
class HarmonyParser {
  public:
    explicit HarmonyParser(bool parse_tools) : parse_tools_(parse_tools) {}
    ChatDelta feed(std::string_view text);
    ChatDelta finish();
    size_t tool_calls() const { return calls_; }

  private:
    enum class Part { Header, Reasoning, Content, Call };
    bool step(ChatDelta& out, bool at_end);  // one transition; false when it needs more text
    bool step_header(ChatDelta& out, bool at_end);
    bool step_body(ChatDelta& out, bool at_end);
    void open_body(std::string_view header, ChatDelta& out);

    bool parse_tools_;
    Part part_ = Part::Header;
    std::string buf_;
    size_t calls_ = 0;
};

class ChatOutputParser {
  public:
    // parse_tools false: a <tool_call> is content like any other text (no tools were offered).
    ChatOutputParser(const ChatSyntax& syntax, bool parse_tools);

    ChatDelta feed(std::string_view text);
    ChatDelta finish();
    size_t tool_calls() const { return harmony_ ? harmony_->tool_calls() : calls_; }

  private:
    enum class State { Start, Reasoning, Content, Call };
    bool step(ChatDelta& out, bool at_end);  // one transition; false when it needs more text
    bool step_start(bool at_end);
    bool step_reasoning(ChatDelta& out, bool at_end);
    bool step_content(ChatDelta& out, bool at_end);
    bool step_call(ChatDelta& out, bool at_end);
    void stream_arguments(ChatDelta& out);
    void end_call(ChatDelta& out, std::string_view body, bool closed);

    ChatSyntax syntax_;
    bool parse_tools_;
    State state_;
    std::string buf_;         // text not yet said
    std::string held_space_;  // reasoning's trailing whitespace, said only if more reasoning follows
    bool reasoning_began_ = false, content_began_ = false;
    size_t calls_ = 0;
    // The call being read: once its name is known its arguments stream (args_sent bytes so far).
    bool call_streaming_ = false;
    size_t args_start_ = 0, args_sent_ = 0;
    std::optional<HarmonyParser> harmony_;  // ToolSyntax::Harmony: that parser instead
};

}  // namespace minfer::server
