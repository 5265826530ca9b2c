// HarmonyParser (chat_output.h): gpt-oss's messages split into reasoning, content and tool calls.
#include <algorithm>
#include <array>

#include "server/chat_output.h"

namespace minfer::server {

namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>", kEnd = "<|end|>",
                           kReturn = "<|return|>", kCall = "<|call|>", kStart = "<|start|>";
// What ends a message's body (<|start|> too: a model that skips <|end|> begins the next message).
constexpr std::array kBodyEnds = {kEnd, kReturn, kCall, kStart};

// The longest suffix of `s` that is a proper prefix of one of `markers`: held back until the next piece.
template <size_t N>
size_t held_back(std::string_view s, const std::array<std::string_view, N>& markers) {
    size_t n = 0;
    for (const std::string_view m : markers)
        for (size_t k = std::min(s.size(), m.size() - 1); k > n; --k)
            if (s.substr(s.size() - k) == m.substr(0, k)) {
                n = k;
                break;
            }
    return n;
}

// The word after `key` in `header` (up to whitespace or the next marker), empty when key is absent.
std::string_view field(std::string_view header, std::string_view key) {
    const size_t at = header.find(key);
    if (at == std::string_view::npos) return {};
    std::string_view rest = header.substr(at + key.size());
    const size_t end = rest.find_first_of(" \t\n<");
    return rest.substr(0, end);
}

}  // namespace

ChatDelta HarmonyParser::feed(std::string_view text) {
    buf_ += text;
    ChatDelta out;
    while (step(out, false)) {
    }
    return out;
}

ChatDelta HarmonyParser::finish() {
    ChatDelta out;
    while (step(out, true)) {
    }
    return out;
}

bool HarmonyParser::step(ChatDelta& out, bool at_end) {
    return part_ == Part::Header ? step_header(out, at_end) : step_body(out, at_end);
}

// Between messages: a header up to <|message|>. Text that starts no header (a model answering without
// channels) is content up to the next marker.
bool HarmonyParser::step_header(ChatDelta& out, bool at_end) {
    if (buf_.empty()) return false;
    if (!buf_.starts_with("<|")) {
        if (buf_.size() == 1 && buf_[0] == '<' && !at_end) return false;
        part_ = Part::Content;
        return true;
    }
    const size_t msg = buf_.find(kMessage);
    if (msg == std::string::npos) {
        if (!at_end) return false;
        buf_.clear();  // a header cut off by the end: nothing to say
        return false;
    }
    const std::string header = buf_.substr(0, msg);
    buf_.erase(0, msg + kMessage.size());
    open_body(header, out);
    return true;
}

void HarmonyParser::open_body(std::string_view header, ChatDelta& out) {
    const std::string_view channel = field(header, kChannel), to = field(header, "to=");
    if (channel == "analysis") {
        part_ = Part::Reasoning;
    } else if (channel == "commentary" && parse_tools_ && to.starts_with("functions.")) {
        part_ = Part::Call;
        out.tool_calls.push_back({calls_, make_call_id(), std::string(to.substr(10)), ""});
    } else {
        part_ = Part::Content;
    }
}

// A body up to its closing marker, said as it comes (a possible marker's start held back).
bool HarmonyParser::step_body(ChatDelta& out, bool at_end) {
    size_t end = std::string::npos, skip = 0;
    for (const std::string_view m : kBodyEnds)
        if (const size_t at = buf_.find(m); at < end) end = at, skip = m == kStart ? 0 : m.size();
    const size_t said = end != std::string::npos ? end
                        : at_end                 ? buf_.size()
                                                 : buf_.size() - held_back(buf_, kBodyEnds);
    const std::string piece = buf_.substr(0, said);
    if (!piece.empty()) {
        if (part_ == Part::Reasoning) out.reasoning += piece;
        if (part_ == Part::Content) out.content += piece;
        if (part_ == Part::Call) out.tool_calls.push_back({calls_, "", "", piece});
    }
    buf_.erase(0, said);
    if (end == std::string::npos && !at_end) return false;
    if (part_ == Part::Call) ++calls_;
    buf_.erase(0, skip);
    part_ = Part::Header;
    return !buf_.empty();
}

}  // namespace minfer::server
