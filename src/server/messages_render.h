// /v1/messages answers in Anthropic's shapes (messages.h): the whole message, and its server-sent events
// through a ChatStreamWriter. Split from messages.cpp, which reads the request.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_run.h"

namespace minfer {
class Tokenizer;
}

namespace minfer::server {

// What every part of one answer shares.
struct MessageMeta {
    std::string id;     // msg_ and 24 hex digits
    std::string model;  // the served model's name
    // The generated tokens' spelling and the request's stop_sequences: which one ended the answer.
    const Tokenizer* tok = nullptr;
    std::vector<std::string> stop_sequences;
};
MessageMeta make_message_meta(const std::string& model, const Tokenizer& tok, std::vector<std::string> stops);

// {id, type: "message", role, model, content: [thinking?, text?, tool_use...], stop_reason,
// stop_sequence, usage}.
nlohmann::ordered_json message_json(const MessageMeta& m, const ChatAnswer& a);

// The writer of one streamed message: message_start, a block per part (thinking, text, each tool_use)
// opened, filled and stopped in order, message_delta with the stop reason and usage, message_stop.
std::shared_ptr<ChatStreamWriter> message_stream_writer(MessageMeta m);

}  // namespace minfer::server
