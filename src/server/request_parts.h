// The request parser's pieces shared by its files (request.cpp: the fields every route has;
// request_chat.cpp: messages, tools, tool_choice and the template's arguments).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"
#include "server/request.h"

namespace minfer::server {

const char* type_name(const nlohmann::ordered_json& v);  // "a string", "an object", ...
ApiError wrong_type(const std::string& field, const char* want, const nlohmann::ordered_json& got);
const nlohmann::ordered_json* field(const nlohmann::ordered_json& body,
                                    const char* name);  // present and not null
bool boolean(const nlohmann::ordered_json& body, const char* name, bool dflt);

// Chat's fields: messages, tools, tool_choice, parallel_tool_calls, enable_thinking, chat_template_kwargs.
void chat_request(const nlohmann::ordered_json& body, CompletionRequest& r);

}  // namespace minfer::server
