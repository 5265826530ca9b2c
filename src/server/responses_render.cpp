#include "server/responses_render.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "server/http.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

using nlohmann::json;

namespace {

// 24 random hex digits after the prefix, like OpenAI's ids (resp_, rs_, msg_, fc_).
std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
    return id;
}

enum class Kind { Reasoning, Message, Call };

// One output item and the text it holds: reasoning, content, or a call's arguments.
struct Item {
    Kind kind = Kind::Message;
    std::string id, text;
    std::string call_id, name;  // Call
};

Item new_item(Kind k, std::string text = "", std::string call_id = "", std::string name = "") {
    const char* prefix = k == Kind::Reasoning ? "rs_" : k == Kind::Message ? "msg_" : "fc_";
    return {k, random_id(prefix), std::move(text), std::move(call_id), std::move(name)};
}

// A message's or a reasoning item's one content part.
json part_json(Kind k, const std::string& text) {
    if (k == Kind::Reasoning) return {{"type", "reasoning_text"}, {"text", text}};
    return {
        {"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
}

// The item as `output` lists it once done; not done, as output_item.added announces it (no content yet).
json item_json(const Item& it, const char* status, bool done) {
    const json content = done ? json::array({part_json(it.kind, it.text)}) : json::array();
    switch (it.kind) {
        case Kind::Reasoning:
            return {{"type", "reasoning"},
                    {"id", it.id},
                    {"summary", json::array()},
                    {"content", content},
                    {"status", status}};
        case Kind::Message:
            return {{"type", "message"},
                    {"id", it.id},
                    {"status", status},
                    {"role", "assistant"},
                    {"content", content}};
        case Kind::Call:
            break;
    }
    return {{"type", "function_call"},          {"id", it.id},     {"call_id", it.call_id}, {"name", it.name},
            {"arguments", done ? it.text : ""}, {"status", status}};
}

// "completed", or "incomplete" when max_output_tokens (or the server shutting down) cut the answer short.
const char* final_status(const GenerationResult& r) {
    return r.finish == FinishReason::Stop ? "completed" : "incomplete";
}

// The reasoning's share of the output tokens, counted by tokenizing its text again (an estimate: the
// parser dropped its tags and the whitespace around them).
json usage_json(const ResponsesMeta& m, const GenerationResult& r, const std::string& reasoning) {
    const int64_t out = int64_t(r.ids.size());
    int64_t thought = 0;
    if (!reasoning.empty() && m.tok)
        thought = std::min(out, int64_t(m.tok->encode(reasoning, false, false).size()));
    return {{"input_tokens", r.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
            {"output_tokens", out},
            {"output_tokens_details", {{"reasoning_tokens", thought}}},
            {"total_tokens", r.prompt_tokens + out}};
}

json response_object(const ResponsesMeta& m, const std::string& status, json output, json usage, json error) {
    json r = m.echo;
    r["id"] = m.id;
    r["object"] = "response";
    r["created_at"] = m.created_at;
    r["model"] = m.model;
    r["status"] = status;
    r["error"] = std::move(error);
    r["incomplete_details"] = status == "incomplete" ? json{{"reason", "max_output_tokens"}} : json(nullptr);
    r["output"] = std::move(output);
    r["usage"] = std::move(usage);
    return r;
}

// The events of one streamed response. One item is open at a time: a part of another kind (or a new
// call) closes it and opens the next, so items are done in output order.
class StreamWriter final : public ChatStreamWriter {
  public:
    explicit StreamWriter(ResponsesMeta m) : m_(std::move(m)) {}

    std::string begin(int64_t) override {
        const json r = response_object(m_, "in_progress", json::array(), nullptr, nullptr);
        const std::string created = event("response.created", {{"response", r}});  // numbered first
        return created + event("response.in_progress", {{"response", r}});
    }

    std::string parts(const ChatDelta& d) override {
        std::string out;
        if (!d.reasoning.empty()) out += piece(Kind::Reasoning, d.reasoning);
        if (!d.content.empty()) out += piece(Kind::Message, d.content);
        for (const ToolCallDelta& t : d.tool_calls) {
            if (!t.id.empty()) {
                out += close("completed");
                out += open(new_item(Kind::Call, "", t.id, t.name));
            }
            if (!t.arguments.empty()) out += piece(Kind::Call, t.arguments);
        }
        return out;
    }

    // An answer with no part at all still gets its (empty) message, as the whole response does.
    std::string end(const ChatAnswer& whole) override {
        const std::string status = final_status(whole.result);
        std::string out = close(status.c_str());
        if (output_.empty()) {
            out += open(new_item(Kind::Message));
            out += close(status.c_str());
        }
        const json r = response_object(m_, status, output_,
                                       usage_json(m_, whole.result, whole.parts.reasoning), nullptr);
        return out +
               event(status == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
    }

    std::string fail(const ApiError& e) override {
        std::string out = close("incomplete");
        const json error = {{"code", "server_error"}, {"message", e.what()}};
        return out + event("response.failed",
                           {{"response", response_object(m_, "failed", output_, nullptr, error)}});
    }

  private:
    std::string event(const char* type, json fields) {
        fields["type"] = type;
        fields["sequence_number"] = seq_++;
        return sse_event(type, fields);
    }

    // Where the open item's events point.
    json at(bool with_content) const {
        json j = {{"item_id", open_->id}, {"output_index", output_.size()}};
        if (with_content) j["content_index"] = 0;
        return j;
    }

    std::string open(Item it) {
        open_ = std::move(it);
        std::string out =
            event("response.output_item.added",
                  {{"output_index", output_.size()}, {"item", item_json(*open_, "in_progress", false)}});
        if (open_->kind == Kind::Call) return out;
        json added = at(true);
        added["part"] = part_json(open_->kind, "");
        return out + event("response.content_part.added", std::move(added));
    }

    // Text for an item of kind k: the open one, or a new one (calls open with their first piece).
    std::string piece(Kind k, const std::string& text) {
        std::string out;
        if (!open_ || open_->kind != k) {
            out += close("completed");
            out += open(new_item(k));
        }
        open_->text += text;
        json e = at(k != Kind::Call);
        e["delta"] = text;
        if (k == Kind::Message) e["logprobs"] = json::array();
        const char* type = k == Kind::Reasoning ? "response.reasoning_text.delta"
                           : k == Kind::Message ? "response.output_text.delta"
                                                : "response.function_call_arguments.delta";
        return out + event(type, std::move(e));
    }

    // The open item's .done events, then output_item.done; nothing when none is open.
    std::string close(const char* status) {
        if (!open_) return "";
        const Item& it = *open_;
        std::string out;
        if (it.kind == Kind::Call) {
            json e = at(false);
            e["name"] = it.name;
            e["arguments"] = it.text;
            out += event("response.function_call_arguments.done", std::move(e));
        } else {
            json e = at(true);
            e["text"] = it.text;
            if (it.kind == Kind::Message) e["logprobs"] = json::array();
            out += event(
                it.kind == Kind::Message ? "response.output_text.done" : "response.reasoning_text.done", e);
            e.erase("text");
            e.erase("logprobs");
            e["part"] = part_json(it.kind, it.text);
            out += event("response.content_part.done", std::move(e));
        }
        const json item = item_json(it, status, true);
        out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
        output_.push_back(item);
        open_.reset();
        return out;
    }

    ResponsesMeta m_;
    int64_t seq_ = 0;
    json output_ = json::array();  // the items done
    std::optional<Item> open_;
};

}  // namespace

ResponsesMeta make_responses_meta(const std::string& model, json echo, const Tokenizer& tok) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return {random_id("resp_"), model, std::chrono::duration_cast<std::chrono::seconds>(now).count(),
            std::move(echo), &tok};
}

// The items as a stream would have made them: reasoning, the message (also when the answer is empty),
// the calls; the last one incomplete when the answer was cut short.
json response_json(const ResponsesMeta& m, const ChatAnswer& a) {
    const ChatDelta& p = a.parts;
    std::vector<Item> items;
    if (!p.reasoning.empty()) items.push_back(new_item(Kind::Reasoning, p.reasoning));
    if (!p.content.empty() || (p.reasoning.empty() && p.tool_calls.empty()))
        items.push_back(new_item(Kind::Message, p.content));
    for (const ToolCallDelta& t : p.tool_calls)
        items.push_back(new_item(Kind::Call, t.arguments, t.id, t.name));
    const std::string status = final_status(a.result);
    json output = json::array();
    for (size_t i = 0; i < items.size(); ++i)
        output.push_back(item_json(
            items[i], i + 1 == items.size() && status == "incomplete" ? "incomplete" : "completed", true));
    return response_object(m, status, std::move(output), usage_json(m, a.result, p.reasoning), nullptr);
}

std::shared_ptr<ChatStreamWriter> responses_stream_writer(ResponsesMeta m) {
    return std::make_shared<StreamWriter>(std::move(m));
}

}  // namespace minfer::server
