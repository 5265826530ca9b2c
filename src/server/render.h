// Response bodies in OpenAI's shapes (what llama-server also sends): chat.completion and text_completion
// objects, their streamed chunks as server-sent events, usage with prompt_tokens_details.cached_tokens,
// and the error envelope. Text is dumped with invalid UTF-8 replaced, so rendering never throws.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "server/chat_output.h"
#include "server/http.h"  // dump, sse_event
#include "server/request.h"

namespace minfer::server {

struct ApiError;

// What every object of one response shares.
struct ResponseMeta {
    Endpoint endpoint = Endpoint::Completion;
    std::string id;     // chatcmpl-... / cmpl-...
    std::string model;  // the served model's name
    int64_t created = 0;
    const Tokenizer* tok = nullptr;  // set when logprobs are asked: it spells their tokens
};
ResponseMeta make_meta(Endpoint endpoint, const std::string& model);

// Chat: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}. Completions (the legacy
// shape): {tokens, token_logprobs, top_logprobs, text_offset}, offsets counted from `offset`, advanced.
nlohmann::json logprobs_json(const ResponseMeta& m, const std::vector<TokenLogprob>& lp, size_t& offset);

// "stop", "tool_calls" (stopped after calling tools) or "length"; a cancelled choice (server shutting
// down) reports "length": it was cut short.
const char* finish_name(FinishReason r, bool called_tools = false);

// n choices share the prompt: prompt tokens and cached tokens are those of the first.
nlohmann::json usage_json(const std::vector<GenerationResult>& results);
// The assistant message of a chat choice: content (null when empty beside tool calls),
// reasoning_content and reasoning (when any), tool_calls (when any).
nlohmann::json chat_message_json(const ChatDelta& answer);
// logprobs: per choice when asked (meta.tok set), else empty; answers: chat's parsed choices.
nlohmann::json completion_json(const ResponseMeta& m, const std::vector<GenerationResult>& results,
                               const std::vector<std::vector<TokenLogprob>>& logprobs,
                               const std::vector<ChatDelta>& answers);

// One streamed chunk of choice `index`: the role (first chunk of a chat choice), text (completions) or
// the chat answer's new parts, or the finish.
struct Delta {
    size_t index = 0;
    bool role = false;
    std::string text;
    ChatDelta chat;
    std::optional<FinishReason> finish;
    bool called_tools = false;           // with finish: the choice called tools
    std::vector<TokenLogprob> logprobs;  // the tokens sampled since the last chunk (meta.tok set)
    size_t offset = 0;                   // completions: the choice's text bytes before this chunk
};
nlohmann::json chunk_json(const ResponseMeta& m, const Delta& d);
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const std::vector<GenerationResult>& results);

std::string error_json(const ApiError& e);

}  // namespace minfer::server
