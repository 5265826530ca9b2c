#include "server/chat_run.h"

#include <httplib.h>

#include <random>

#include "server/engine_loop.h"
#include "server/peer.h"

namespace minfer::server {

using namespace std::chrono_literals;

ApiError engine_error(const std::string& why) {
    return {500, "server_error", "engine_failed", "the engine failed: " + why};
}

Submitted submit_request(const CompletionContext& ctx, CompletionRequest& r) {
    Submitted s{ctx.prompt.prepare(r), nullptr};
    const std::vector<int32_t>& prompt = s.prompt.tokens;
    if (prompt.empty()) throw bad_request("the prompt is empty");
    if (int64_t(prompt.size()) >= ctx.loop.n_ctx())
        throw bad_request("the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                              std::to_string(ctx.loop.n_ctx()) + " (prompt and at least one generated token)",
                          "context_length_exceeded");
    r.gen.n_predict = r.max_tokens.value_or(ctx.loop.n_ctx() - int64_t(prompt.size()));
    if (!r.seed_given) r.gen.sampling.seed = std::random_device{}();
    const ToolSyntax syntax = s.prompt.syntax.tools;
    if (s.prompt.parse_tools && !r.parallel_tool_calls && syntax == ToolSyntax::Hermes)
        r.gen.stop.push_back("</tool_call>");  // one call (a harmony call ends generation with <|call|>)
    // Harmony's channels are control tokens: the parser reads them, the client never sees them.
    if (r.endpoint == Endpoint::Chat && syntax == ToolSyntax::Harmony) r.gen.special = true;
    request_tokens().prompt = int64_t(prompt.size());
    s.job = ctx.loop.submit(prompt, r.gen, r.n, r.logprobs, s.prompt.grammar);
    return s;
}

bool wait_whole(EngineLoop& loop, Job& job, const PeerWatch& peer) {
    for (uint64_t seen = 0;;) {
        {
            std::lock_guard lock(job.mu);
            if (job.all_done()) {
                if (!job.error.empty()) throw engine_error(job.error);
                return true;
            }
        }
        job.wait(seen, 100ms);
        if (peer.gone()) {
            loop.cancel(job);
            return false;
        }
    }
}

std::vector<GenerationResult> finished_results(const Job& job) {
    std::vector<GenerationResult> out;
    RequestTokens& t = request_tokens();
    for (const Job::Choice& c : job.choices) {
        out.push_back(c.result);
        t.generated += int64_t(c.result.ids.size());
    }
    if (!out.empty()) t.prompt = out[0].prompt_tokens;
    return out;
}

ChatDelta parse_answer(const PreparedPrompt& p, const std::string& text) {
    ChatOutputParser parser(p.syntax, p.parse_tools);
    ChatDelta d = parser.feed(p.forced);
    d.append(parser.feed(text));
    d.append(parser.finish());
    return d;
}

std::optional<ChatAnswer> run_chat_whole(const CompletionContext& ctx, CompletionRequest& r,
                                         const httplib::Request& req) {
    const Submitted s = submit_request(ctx, r);
    if (!wait_whole(ctx.loop, *s.job, PeerWatch(req))) return std::nullopt;
    std::lock_guard lock(s.job->mu);
    ChatAnswer a;
    a.result = finished_results(*s.job).at(0);
    a.parts = parse_answer(s.prompt, a.result.text);
    a.called_tools = !a.parts.tool_calls.empty();
    return a;
}

namespace {

// What the streaming provider keeps between its calls.
struct ChatStream {
    std::shared_ptr<Job> job;
    std::shared_ptr<ChatStreamWriter> writer;
    ChatOutputParser parser;
    ChatDelta pending, whole;  // the forced start, not yet sent; everything said so far
    int64_t prompt_tokens = 0;
    uint64_t seen = 0;
    bool begun = false;
};

// The events that became available; sets `end` once everything is written.
std::string next_chat_events(ChatStream& s, bool& end) {
    std::lock_guard lock(s.job->mu);
    Job::Choice& c = s.job->choices.at(0);
    std::string out;
    if (!s.begun) out += s.writer->begin(s.prompt_tokens);
    s.begun = true;
    ChatDelta d = std::exchange(s.pending, {});
    d.append(s.parser.feed(std::exchange(c.pending, {})));
    end = s.job->all_done();
    if (end) d.append(s.parser.finish());
    if (!d.empty()) {
        out += s.writer->parts(d);
        s.whole.append(d);
    }
    if (!end) return out;
    if (!s.job->error.empty()) return out + s.writer->fail(engine_error(s.job->error));
    ChatAnswer a{s.whole, finished_results(*s.job).at(0), s.parser.tool_calls() > 0};
    return out + s.writer->end(a);
}

}  // namespace

void run_chat_streaming(const CompletionContext& ctx, CompletionRequest& r,
                        std::shared_ptr<ChatStreamWriter> w, httplib::Response& res) {
    Submitted sub = submit_request(ctx, r);
    auto s =
        std::make_shared<ChatStream>(ChatStream{sub.job,
                                                std::move(w),
                                                ChatOutputParser(sub.prompt.syntax, sub.prompt.parse_tools),
                                                {},
                                                {},
                                                int64_t(sub.prompt.tokens.size())});
    s->pending = s->parser.feed(sub.prompt.forced);
    EngineLoop& loop = ctx.loop;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [s](size_t, httplib::DataSink& sink) {
            if (!sink.is_writable()) return false;
            s->job->wait(s->seen, 100ms);
            bool end = false;
            const std::string events = next_chat_events(*s, end);
            if (!events.empty() && !sink.write(events.data(), events.size())) return false;
            if (end) sink.done();
            return true;
        },
        [s, &loop](bool success) {
            if (!success) loop.cancel(*s->job);
        });
}

}  // namespace minfer::server
