#include "server/tool_prompt.h"

#include <string>

namespace minfer::server {

namespace {

using ordered = nlohmann::ordered_json;

std::string json_text(const ordered& j) {
    return j.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

std::string tools_text(const ordered& tools) {
    std::string s =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
        "with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ordered& t : tools) s += "\n" + json_text(t);
    return s +
           "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
           "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
           "\"arguments\": <args-json-object>}\n</tool_call>";
}

std::string calls_text(const ordered& m) {
    std::string s = m.value("content", std::string());
    for (const ordered& c : m["tool_calls"]) {
        if (!s.empty()) s += "\n";
        s += hermes_call(c["function"]["name"], c["function"]["arguments"]);
    }
    return s;
}

}  // namespace

std::string hermes_call(const ordered& name, const ordered& arguments) {
    return "<tool_call>\n{\"name\": " + json_text(name) + ", \"arguments\": " + json_text(arguments) +
           "}\n</tool_call>";
}

ordered messages_with_tools(const ordered& messages, const ordered& tools) {
    ordered out = ordered::array();
    for (const ordered& m : messages) {
        const std::string role = m["role"];
        if (role == "tool") {
            const std::string response =
                "<tool_response>\n" + m.value("content", std::string()) + "\n</tool_response>";
            const bool joins =
                !out.empty() && out.back()["role"] == "user" && out.back().value("from_tool", false);
            if (joins)
                out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + response;
            else
                out.push_back({{"role", "user"}, {"content", response}, {"from_tool", true}});
        } else if (role == "assistant" && m.contains("tool_calls")) {
            out.push_back({{"role", "assistant"}, {"content", calls_text(m)}});
        } else {
            out.push_back(m);
        }
    }
    for (ordered& m : out) m.erase("from_tool");
    if (tools.empty()) return out;
    if (!out.empty() && out[0]["role"] == "system")
        out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + tools_text(tools);
    else
        out.insert(out.begin(), ordered{{"role", "system"}, {"content", tools_text(tools)}});
    return out;
}

}  // namespace minfer::server
