// libFuzzer target: Jinja chat-template parse + render of arbitrary template text with a realistic
// conversation (system, user, assistant with tool calls, tool) and tools. Any outcome but output or
// minfer::Error (a crash, a sanitizer report, another exception, running out of memory or time) is a
// finding.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/template/chat_template.h"
#include "util/error.h"

namespace {

const nlohmann::ordered_json& messages() {
    static const auto m = nlohmann::ordered_json::parse(R"([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2? <think>"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
            "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "<think>easy</think>4"},
        {"role": "user", "content": "Thanks \u00e9\u4e2d"}])");
    return m;
}

const nlohmann::ordered_json& extra() {
    static const auto e = nlohmann::ordered_json::parse(R"({
        "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false,
        "tools": [{"type": "function", "function": {"name": "add", "description": "Adds",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]})");
    return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string tmpl(reinterpret_cast<const char*>(data), size);
    try {
        minfer::render_chat_template(tmpl, messages(), true, extra());
    } catch (const minfer::Error&) {
    }
    return 0;
}
