#include "server/chat_output.h"

#include <nlohmann/json.hpp>
#include <random>

namespace minfer::server {

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// How many trailing bytes of `s` could begin `marker`: held back until the next piece decides.
size_t partial_marker(std::string_view s, std::string_view marker) {
    if (marker.empty()) return 0;
    for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

size_t skip_space(std::string_view s, size_t i) {
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

std::string_view rstrip(std::string_view s) {
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

enum class Match { Yes, Partial, No };

// `lit` at s[i]: Yes (i moved past it), Partial (s ends inside it) or No.
Match literal(std::string_view s, size_t& i, std::string_view lit) {
    const size_t n = std::min(lit.size(), s.size() - i);
    if (s.substr(i, n) != lit.substr(0, n)) return Match::No;
    if (n < lit.size()) return Match::Partial;
    i += n;
    return Match::Yes;
}

// A JSON string at s[i] (no escapes decoded: tool names are plain), its text in `out`.
Match json_string(std::string_view s, size_t& i, std::string& out) {
    if (i >= s.size()) return Match::Partial;
    if (s[i] != '"') return Match::No;
    const size_t end = s.find('"', i + 1);
    if (end == std::string_view::npos) return Match::Partial;
    out = std::string(s.substr(i + 1, end - i - 1));
    if (out.find('\\') != std::string::npos || out.empty()) return Match::No;
    i = end + 1;
    return Match::Yes;
}

// `{"name": "NAME", "KEY": ` with JSON's optional whitespace: where the arguments begin.
Match call_header(std::string_view s, const std::string& key, std::string& name, size_t& args) {
    size_t i = 0;
    for (std::string_view lit :
         {std::string_view("{"), std::string_view("\"name\""), std::string_view(":"), std::string_view(),
          std::string_view(","), std::string_view(key), std::string_view(":")}) {
        i = skip_space(s, i);
        if (i >= s.size()) return Match::Partial;
        const Match m = lit.empty() ? json_string(s, i, name) : literal(s, i, lit);
        if (m != Match::Yes) return m;
    }
    i = skip_space(s, i);
    if (i >= s.size()) return Match::Partial;
    args = i;
    return Match::Yes;
}

// The length of the JSON value at the start of `s` when it is complete there (an object, array or
// string: arguments are objects), else npos.
size_t json_value_end(std::string_view s) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            if (!in_string && depth == 0) return i + 1;
            continue;
        }
        if (c == '"')
            in_string = true;
        else if (c == '{' || c == '[')
            ++depth;
        else if ((c == '}' || c == ']') && --depth <= 0)
            return i + 1;
    }
    return std::string_view::npos;
}

}  // namespace

std::string make_call_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* alnum = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += alnum[rng() % 62];
    return id;
}

ChatSyntax detect_chat_syntax(const std::string& tmpl) {
    ChatSyntax s;
    if (tmpl.find("<|channel|>") != std::string::npos && tmpl.find("<|message|>") != std::string::npos) {
        s.tools = ToolSyntax::Harmony;  // gpt-oss: the template renders tools in its own namespace
        s.native_tools = true;
        return s;
    }
    s.think_tags = tmpl.find("<think>") != std::string::npos;
    const bool has_tools = tmpl.find("tools") != std::string::npos;
    s.native_tools = has_tools && tmpl.find("<tool_call>") != std::string::npos;
    if (!s.native_tools && has_tools && tmpl.find("ipython") != std::string::npos &&
        tmpl.find("\"parameters\"") != std::string::npos) {
        s.tools = ToolSyntax::Llama3Json;
        s.native_tools = true;
    }
    return s;
}

void ChatDelta::append(ChatDelta d) {
    reasoning += d.reasoning;
    content += d.content;
    for (ToolCallDelta& t : d.tool_calls) {
        if (!tool_calls.empty() && tool_calls.back().index == t.index && t.id.empty())
            tool_calls.back().arguments += t.arguments;
        else
            tool_calls.push_back(std::move(t));
    }
}

ChatOutputParser::ChatOutputParser(const ChatSyntax& syntax, bool parse_tools)
    : syntax_(syntax),
      parse_tools_(parse_tools),
      state_(syntax.starts_in_reasoning ? State::Reasoning : State::Start) {
    if (syntax.tools == ToolSyntax::Harmony) harmony_.emplace(parse_tools);
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
    if (harmony_) return harmony_->feed(text);
    buf_ += text;
    ChatDelta out;
    while (step(out, false)) {
    }
    return out;
}

ChatDelta ChatOutputParser::finish() {
    if (harmony_) return harmony_->finish();
    ChatDelta out;
    while (step(out, true)) {
    }
    return out;
}

bool ChatOutputParser::step(ChatDelta& out, bool at_end) {
    switch (state_) {
        case State::Start:
            return step_start(at_end);
        case State::Reasoning:
            return step_reasoning(out, at_end);
        case State::Content:
            return step_content(out, at_end);
        case State::Call:
            return step_call(out, at_end);
    }
    return false;
}

// Before the first word: reasoning when the answer opens with <think>, a call when it opens with '{'
// in Llama 3's syntax, else content.
bool ChatOutputParser::step_start(bool at_end) {
    const size_t i = skip_space(buf_, 0);
    const bool bare_calls = parse_tools_ && syntax_.tools == ToolSyntax::Llama3Json;
    if (!syntax_.think_tags && !bare_calls) {
        state_ = State::Content;
        return true;
    }
    if (i == buf_.size() && !at_end) return false;
    if (bare_calls && i < buf_.size() && buf_[i] == '{') {
        buf_.erase(0, i);
        state_ = State::Call;
        call_streaming_ = false;
        return true;
    }
    if (!syntax_.think_tags) {
        state_ = State::Content;
        return true;
    }
    size_t at = i;
    const Match m = literal(buf_, at, kThinkOpen);
    if (m == Match::Partial && !at_end) return false;
    if (m == Match::Yes) {
        buf_.erase(0, at);
        state_ = State::Reasoning;
    } else {
        state_ = State::Content;
    }
    return true;
}

bool ChatOutputParser::step_reasoning(ChatDelta& out, bool at_end) {
    if (!reasoning_began_) {
        buf_.erase(0, skip_space(buf_, 0));
        if (buf_.empty()) return false;
    }
    const size_t close = buf_.find(kThinkClose);
    const size_t said = close != std::string::npos ? close
                        : at_end                   ? buf_.size()
                                                   : buf_.size() - partial_marker(buf_, kThinkClose);
    const std::string_view text = std::string_view(buf_).substr(0, said);
    const std::string_view kept = rstrip(text);
    if (!kept.empty()) {
        out.reasoning += std::exchange(held_space_, {});
        out.reasoning += kept;
        reasoning_began_ = true;
    }
    held_space_ += text.substr(kept.size());
    buf_.erase(0, said);
    if (close == std::string::npos) return false;
    buf_.erase(0, kThinkClose.size());
    held_space_.clear();
    content_began_ = false;
    state_ = State::Content;
    return true;
}

// Content up to a <tool_call>; the whitespace before a call and after </think> or a call is dropped.
bool ChatOutputParser::step_content(ChatDelta& out, bool at_end) {
    if (!content_began_ && (reasoning_began_ || calls_ > 0)) buf_.erase(0, skip_space(buf_, 0));
    if (buf_.empty()) return false;
    content_began_ = true;
    const std::string_view call_open = syntax_.call_open();
    const size_t open = parse_tools_ && !call_open.empty() ? buf_.find(call_open) : std::string::npos;
    if (open != std::string::npos) {
        out.content += rstrip(std::string_view(buf_).substr(0, open));
        buf_.erase(0, open + call_open.size());
        state_ = State::Call;
        call_streaming_ = false;
        return true;
    }
    size_t said = buf_.size();
    if (parse_tools_ && !at_end && !call_open.empty()) {
        said -= partial_marker(buf_, call_open);
        said = rstrip(std::string_view(buf_).substr(0, said)).size();  // may precede a call
    }
    out.content += std::string_view(buf_).substr(0, said);
    buf_.erase(0, said);
    return false;
}

bool ChatOutputParser::step_call(ChatDelta& out, bool at_end) {
    if (!call_streaming_) {
        std::string name;
        const Match m =
            call_header(buf_, '"' + std::string(syntax_.arguments_key()) + '"', name, args_start_);
        if (m == Match::Yes) {
            out.tool_calls.push_back({calls_, make_call_id(), name, ""});
            call_streaming_ = true;
            args_sent_ = 0;
        }
    }
    if (call_streaming_) stream_arguments(out);
    // Hermes: up to </tool_call>; Llama 3: the call is the JSON object itself.
    const std::string_view call_close = syntax_.call_close();
    const size_t end = call_close.empty() ? json_value_end(buf_) : buf_.find(call_close);
    if (end == std::string::npos && !at_end) return false;
    end_call(out, std::string_view(buf_).substr(0, end), end != std::string::npos);
    buf_.erase(0, end == std::string::npos ? buf_.size() : end + call_close.size());
    content_began_ = false;
    state_ = State::Content;
    return true;
}

// The arguments' bytes that arrived, up to the end of their JSON value.
void ChatOutputParser::stream_arguments(ChatDelta& out) {
    const std::string_view args = std::string_view(buf_).substr(args_start_);
    const size_t end = json_value_end(args);
    size_t upto =
        end != std::string_view::npos ? end : args.size() - partial_marker(args, syntax_.call_close());
    if (upto <= args_sent_) return;
    out.tool_calls.push_back({calls_, "", "", std::string(args.substr(args_sent_, upto - args_sent_))});
    args_sent_ = upto;
}

// A call whose header did not stream (keys in another order, arguments as a string) is read whole; one
// that is not a JSON call at all stays content, markers included.
void ChatOutputParser::end_call(ChatDelta& out, std::string_view body, bool closed) {
    if (call_streaming_) {
        ++calls_;
        return;
    }
    const auto j = nlohmann::json::parse(body, nullptr, false);
    const char* key = syntax_.arguments_key();
    const bool ok = j.is_object() && j.contains("name") && j["name"].is_string() && j.contains(key);
    if (!ok) {
        out.content += std::string(syntax_.call_open()) + std::string(body) +
                       std::string(closed ? syntax_.call_close() : "");
        return;
    }
    const nlohmann::json& a = j[key];
    out.tool_calls.push_back({calls_, make_call_id(), j["name"].get<std::string>(),
                              a.is_string()
                                  ? a.get<std::string>()
                                  : a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    ++calls_;
}

}  // namespace minfer::server
