#include "server/completions.h"

#include <httplib.h>

#include "server/api_error.h"
#include "server/chat_run.h"
#include "server/engine_loop.h"
#include "server/peer.h"
#include "server/prompt.h"
#include "server/render.h"

namespace minfer::server {

namespace {

using namespace std::chrono_literals;

// Everything the streaming provider keeps between its calls.
struct Stream {
    std::shared_ptr<Job> job;
    ResponseMeta meta;
    bool include_usage = false;
    uint64_t seen = 0;
    std::vector<bool> started, finished;        // per choice: role chunk sent, finish chunk sent
    std::vector<size_t> logprobs_sent, offset;  // per choice: logprobs streamed, their text's bytes
    std::vector<ChatOutputParser> parsers;      // chat: per choice, its answer's parts
    std::vector<ChatDelta> pending;  // chat: per choice, parts read but not sent (the forced start)
};

// One parser per choice, each having read the answer's forced start.
std::vector<ChatOutputParser> parsers_for(const PreparedPrompt& p, size_t n, ChatDelta* forced) {
    std::vector<ChatOutputParser> out(n, ChatOutputParser(p.syntax, p.parse_tools));
    for (ChatOutputParser& parser : out) forced[&parser - out.data()] = parser.feed(p.forced);
    return out;
}

// The logprobs of choice i not streamed yet (none unless asked); job mu held.
std::vector<TokenLogprob> new_logprobs(Stream& s, size_t i, size_t& offset) {
    if (!s.meta.tok) return {};
    const std::vector<TokenLogprob>& all = s.job->choices[i].logprobs;
    std::vector<TokenLogprob> out(all.begin() + std::ptrdiff_t(s.logprobs_sent[i]), all.end());
    s.logprobs_sent[i] = all.size();
    offset = s.offset[i];
    for (const TokenLogprob& t : out) s.offset[i] += s.meta.tok->token_to_bytes(t.id).size();
    return out;
}

// The events that became available: per choice its role (chat, first chunk), new text, its finish; after
// the last choice the usage chunk when asked and [DONE]. Sets `end` once everything is written.
std::string next_events(Stream& s, bool& end) {
    std::string out;
    std::lock_guard lock(s.job->mu);
    for (size_t i = 0; i < s.job->choices.size(); ++i) {
        Job::Choice& c = s.job->choices[i];
        std::string text = std::exchange(c.pending, {});
        const bool finish = c.done && !s.finished[i];
        if (text.empty() && !finish) continue;
        const bool chat = s.meta.endpoint == Endpoint::Chat;
        Delta d;
        d.index = i;
        d.role = chat && !s.started[i];
        if (chat) {
            d.chat.append(std::exchange(s.pending[i], {}));
            d.chat.append(s.parsers[i].feed(text));
            if (finish) d.chat.append(s.parsers[i].finish());
        } else {
            d.text = std::move(text);
        }
        s.started[i] = true;
        if (d.role || !d.text.empty() || !d.chat.empty()) {
            d.logprobs = new_logprobs(s, i, d.offset);
            out += sse_event(chunk_json(s.meta, d));
        }
        if (finish) {
            Delta last;
            last.index = i;
            last.finish = c.result.finish;
            last.called_tools = chat && s.parsers[i].tool_calls() > 0;
            last.logprobs = new_logprobs(s, i, last.offset);
            out += sse_event(chunk_json(s.meta, last));
            s.finished[i] = true;
        }
    }
    end = s.job->all_done();
    if (!end) return out;
    if (!s.job->error.empty()) {
        out += "data: " + error_json(engine_error(s.job->error)) + "\n\n";
    } else {
        const std::vector<GenerationResult> results = finished_results(*s.job);
        if (s.include_usage) out += sse_event(usage_chunk_json(s.meta, results));
    }
    return out + "data: [DONE]\n\n";
}

void respond_streaming(EngineLoop& loop, std::shared_ptr<Job> job, const ResponseMeta& meta, bool usage,
                       const PreparedPrompt& prompt, httplib::Response& res) {
    auto s = std::make_shared<Stream>();
    s->job = std::move(job);
    s->meta = meta;
    s->include_usage = usage;
    s->pending.resize(s->job->choices.size());
    s->parsers = parsers_for(prompt, s->job->choices.size(), s->pending.data());
    s->started.assign(s->job->choices.size(), false);
    s->finished.assign(s->job->choices.size(), false);
    s->logprobs_sent.assign(s->job->choices.size(), 0);
    s->offset.assign(s->job->choices.size(), 0);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [s](size_t, httplib::DataSink& sink) {
            if (!sink.is_writable()) return false;
            s->job->wait(s->seen, 100ms);
            bool end = false;
            const std::string events = next_events(*s, end);
            if (!events.empty() && !sink.write(events.data(), events.size())) return false;
            if (end) sink.done();
            return true;
        },
        [s, &loop](bool success) {
            if (!success) loop.cancel(*s->job);
        });
}

void respond_whole(EngineLoop& loop, const std::shared_ptr<Job>& job, const ResponseMeta& meta,
                   const PreparedPrompt& prompt, const PeerWatch& peer, httplib::Response& res) {
    if (!wait_whole(loop, *job, peer)) return;
    std::lock_guard lock(job->mu);
    const std::vector<GenerationResult> results = finished_results(*job);
    std::vector<std::vector<TokenLogprob>> logprobs;
    if (meta.tok)
        for (const Job::Choice& c : job->choices) logprobs.push_back(c.logprobs);
    std::vector<ChatDelta> answers;
    if (meta.endpoint == Endpoint::Chat)
        for (const GenerationResult& r : results) answers.push_back(parse_answer(prompt, r.text));
    res.set_content(dump(completion_json(meta, results, logprobs, answers)), "application/json");
}

}  // namespace

void handle_completion(const CompletionContext& ctx, const httplib::Request& req, httplib::Response& res,
                       Endpoint endpoint) {
    CompletionRequest r = parse_completion_request(req.body, endpoint, {ctx.loop.n_ctx(), 16});
    Submitted sub = submit_request(ctx, r);
    const PreparedPrompt& prepared = sub.prompt;
    std::shared_ptr<Job> job = std::move(sub.job);
    ResponseMeta meta = make_meta(endpoint, ctx.model_name);
    if (r.logprobs >= 0) meta.tok = &ctx.prompt.tokenizer();
    if (r.stream)
        respond_streaming(ctx.loop, std::move(job), meta, r.include_usage, prepared, res);
    else
        respond_whole(ctx.loop, job, meta, prepared, PeerWatch(req), res);
}

}  // namespace minfer::server
