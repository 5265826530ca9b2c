#include "server/engine_loop.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "runtime/embed.h"
#include "server/api_error.h"
#include "util/error.h"

namespace minfer::server {

namespace {

int64_t micros(Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

// One embeddings request: its inputs, and their vectors as the scheduler thread makes them (read by the
// HTTP thread once done). done and error are guarded by the loop's mu_.
struct EngineLoop::EmbedJob {
    std::vector<std::vector<int32_t>> inputs;
    Pooling pooling;
    std::vector<std::vector<float>> vectors;
    bool done = false;
    std::optional<ApiError> error;
};

bool Job::wait(uint64_t& seen, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return version != seen; })) return false;
    seen = version;
    return true;
}

std::string Job::take_text(size_t choice) {
    std::lock_guard lock(mu);
    return std::exchange(choices[choice].pending, {});
}

bool Job::all_done() const {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.done; });
}

EngineLoop::EngineLoop(const Model& m, const EngineParams& p, const Tokenizer& tok, Metrics& metrics,
                       const LoopOptions& o)
    : engine_(m, p), sched_(engine_, tok), metrics_(metrics), opt_(o) {
    publish_stats();
    thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
    drain(std::chrono::milliseconds(0));
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    fail_embeds(ApiError(503, "server_error", "unavailable", "the server is shutting down"));
}

void EngineLoop::kick() {
    {
        std::lock_guard lock(mu_);
        kicked_ = true;
    }
    cv_.notify_all();
}

// Steps while there is work; sleeps until a submission or a cancellation kicks it.
void EngineLoop::run() {
    for (;;) {
        {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return kicked_ || stop_; });
            if (stop_) return;
            kicked_ = false;
        }
        try {
            for (bool busy = true; busy; publish_stats()) {
                run_embeds();  // between steps: the queued embeddings that fit now
                busy = sched_.step();
            }
            run_embeds();  // those that waited for room: nothing runs now, so each fits
        } catch (const std::exception& e) {
            fail_all(e.what());
        }
        publish_stats();
    }
}

void EngineLoop::publish_stats() {
    metrics_.requests_running = int64_t(sched_.n_running());
    metrics_.requests_waiting = int64_t(sched_.n_waiting());
    metrics_.kv_blocks_used = engine_.pool().n_used();
    metrics_.kv_blocks_total = engine_.pool().n_blocks();
    const kv::BlockPool* window = engine_.window_pool();
    metrics_.kv_window_blocks_used = window ? window->n_used() : 0;
    metrics_.kv_window_blocks_total = window ? window->n_blocks() : 0;
    metrics_.prefix_hit_tokens = engine_.prefix_hit_tokens();
    metrics_.preemptions = sched_.preemptions();
}

// The engine threw inside a step: its state is no longer trusted, so every job ends with the error and
// the loop refuses new work (GET /health turns 503).
void EngineLoop::fail_all(const std::string& why) {
    std::fprintf(stderr, "serve: the engine failed, refusing new requests: %s\n", why.c_str());
    std::vector<std::shared_ptr<Job>> jobs;
    {
        std::lock_guard lock(mu_);
        draining_ = true;
        jobs.swap(jobs_);
        reserved_ = 0;
    }
    fail_embeds(ApiError(500, "server_error", "internal_error", why));
    for (const auto& j : jobs) {
        std::lock_guard lock(j->mu);
        j->error = why;
        j->followers.clear();  // their callbacks hold the job
        for (Job::Choice& c : j->choices) c.done = true;
        ++j->version;
        j->cv.notify_all();
    }
    cv_.notify_all();
}

GenerationRequest EngineLoop::request_for(const std::shared_ptr<Job>& job, size_t i,
                                          const std::vector<int32_t>& prompt, const GenerateParams& gen,
                                          int n_logprobs, const GrammarSpec& grammar) {
    GenerationRequest r{prompt, gen, {}, {}};
    r.grammar = grammar;
    r.gen.sampling.seed = gen.sampling.seed + i;
    r.on_text = [this, job, i](std::string_view text) { on_text(*job, i, text); };
    r.on_done = [this, job, i](const GenerationResult& res) { on_done(*job, i, res); };
    r.n_logprobs = n_logprobs;
    if (n_logprobs >= 0)
        r.on_logprob = [job, i](const TokenLogprob& t) {
            std::lock_guard lock(job->mu);
            job->choices[i].logprobs.push_back(t);
        };
    return r;
}

std::shared_ptr<Job> EngineLoop::submit(const std::vector<int32_t>& prompt, const GenerateParams& gen, int n,
                                        int n_logprobs, const GrammarSpec& grammar) {
    auto job = std::make_shared<Job>();
    job->choices.resize(size_t(n));
    job->submitted = Clock::now();
    {
        std::lock_guard lock(mu_);
        if (draining_) throw ApiError(503, "server_error", "unavailable", "the server is shutting down");
        if (n > engine_.max_seqs() + opt_.max_queue)
            throw bad_request("'n' is " + std::to_string(n) + "; this server holds at most " +
                              std::to_string(engine_.max_seqs() + opt_.max_queue) +
                              " sequences (-np + --max-queue)");
        if (reserved_ + n > engine_.max_seqs() + opt_.max_queue) {
            ++metrics_.requests_rejected;
            throw ApiError(
                503, "server_error", "queue_full",
                "the server is busy (" + std::to_string(reserved_) + " sequences in flight); retry later");
        }
        reserved_ += n;
        jobs_.push_back(job);
    }
    {
        // Made only once the job is accepted: a follower's callbacks hold the job, so followers that
        // stay in it past its end would keep it alive for ever (fail_all and the refusal below clear them).
        std::lock_guard lock(job->mu);
        for (int i = 1; i < n; ++i)
            job->followers.push_back(request_for(job, size_t(i), prompt, gen, n_logprobs, grammar));
    }
    try {
        const uint64_t id = sched_.submit(request_for(job, 0, prompt, gen, n_logprobs, grammar));
        std::lock_guard lock(job->mu);
        job->choices[0].id = id;
    } catch (const Error& e) {
        {
            std::lock_guard lock(job->mu);
            job->followers.clear();
        }
        std::lock_guard lock(mu_);
        reserved_ -= n;
        std::erase(jobs_, job);
        throw bad_request(e.what());  // what the scheduler refuses: a token id out of range
    }
    kick();
    return job;
}

void EngineLoop::cancel(Job& job) {
    std::vector<uint64_t> ids;
    {
        std::lock_guard lock(job.mu);
        job.cancelled = true;
        for (const Job::Choice& c : job.choices)
            if (c.id != 0 && !c.done) ids.push_back(c.id);
    }
    for (const uint64_t id : ids) sched_.cancel(id);
    kick();
}

void EngineLoop::release_followers(Job& job) {
    for (size_t i = 0; i < job.followers.size(); ++i) {
        Job::Choice& c = job.choices[i + 1];
        if (job.cancelled) {
            c.done = true;
            c.result.finish = FinishReason::Cancelled;
            continue;
        }
        try {
            c.id = sched_.submit(std::move(job.followers[i]));
        } catch (const Error& e) {
            c.done = true;
            job.error = e.what();
        }
    }
}

void EngineLoop::on_text(Job& job, size_t i, std::string_view text) {
    std::lock_guard lock(job.mu);
    if (job.first_token == Clock::time_point()) job.first_token = Clock::now();
    job.choices[i].pending += text;
    if (i == 0 && !job.followers.empty()) {
        release_followers(job);
        job.followers.clear();
    }
    ++job.version;
    job.cv.notify_all();
}

void EngineLoop::on_done(Job& job, size_t i, const GenerationResult& r) {
    int64_t finished = 0;
    bool all = false;
    {
        std::lock_guard lock(job.mu);
        if (job.choices[i].done) return;  // fail_all ended it already
        const size_t before = size_t(std::count_if(job.choices.begin(), job.choices.end(),
                                                   [](const Job::Choice& c) { return c.done; }));
        const Clock::time_point now = Clock::now();
        if (job.first_token == Clock::time_point()) job.first_token = now;
        job.choices[i].done = true;
        job.choices[i].result = r;
        if (i == 0 && !job.followers.empty()) {
            release_followers(job);
            job.followers.clear();
        }
        finished = int64_t(std::count_if(job.choices.begin(), job.choices.end(),
                                         [](const Job::Choice& c) { return c.done; })) -
                   int64_t(before);
        all = job.all_done();
        if (i == 0) {
            metrics_.prompt_us += micros(job.first_token - job.submitted);
            metrics_.generate_us += micros(now - job.first_token);
        }
        ++job.version;
        job.cv.notify_all();
    }
    metrics_.prompt_tokens += r.prompt_tokens;
    metrics_.generated_tokens += int64_t(r.ids.size());
    ++metrics_.requests_done;
    {
        std::lock_guard lock(mu_);
        reserved_ -= finished;
        if (all) std::erase_if(jobs_, [&](const std::shared_ptr<Job>& j) { return j.get() == &job; });
    }
    cv_.notify_all();
}

void EngineLoop::drain(std::chrono::milliseconds grace) {
    std::unique_lock lock(mu_);
    draining_ = true;
    if (cv_.wait_for(lock, grace, [&] { return reserved_ == 0 && embeds_.empty(); })) return;
    const std::vector<std::shared_ptr<Job>> jobs = jobs_;
    lock.unlock();
    fail_embeds(ApiError(503, "server_error", "unavailable", "the server is shutting down"));
    for (const auto& j : jobs) cancel(*j);
    lock.lock();
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return reserved_ == 0; });
}

std::vector<std::vector<float>> EngineLoop::embed(std::vector<std::vector<int32_t>> inputs, Pooling pooling) {
    if (!pools_to_vector(pooling))
        throw bad_request(std::string("pooling '") + pooling_name(pooling) + "' gives no single vector");
    for (const std::vector<int32_t>& ids : inputs) {
        if (ids.empty() || int64_t(ids.size()) > engine_.n_ctx())
            throw bad_request("an input holds " + std::to_string(ids.size()) + " tokens; 1 to " +
                              std::to_string(engine_.n_ctx()) + " are allowed");
        for (const int32_t id : ids)
            if (id < 0 || id >= engine_.model().hp.n_vocab)
                throw bad_request("token id " + std::to_string(id) + " is out of range [0, " +
                                  std::to_string(engine_.model().hp.n_vocab) + ")");
    }
    if (inputs.empty()) return {};
    auto job = std::make_shared<EmbedJob>(EmbedJob{std::move(inputs), pooling, {}, false, std::nullopt});
    std::unique_lock lock(mu_);
    if (draining_) throw ApiError(503, "server_error", "unavailable", "the server is shutting down");
    if (int64_t(embeds_.size()) >= opt_.max_queue) {
        ++metrics_.requests_rejected;
        throw ApiError(503, "server_error", "queue_full",
                       "the server is busy (" + std::to_string(embeds_.size()) +
                           " embedding requests waiting); retry later");
    }
    embeds_.push_back(job);
    kicked_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return job->done; });
    if (job->error) throw *job->error;
    return std::move(job->vectors);
}

// Oldest first, input by input, while a sequence slot is free and the pool holds the input's blocks;
// the rest waits for a running request to end. Runs on the scheduler thread.
void EngineLoop::run_embeds() {
    for (;;) {
        std::shared_ptr<EmbedJob> job;
        {
            std::lock_guard lock(mu_);
            if (embeds_.empty()) return;
            job = embeds_.front();
        }
        const std::vector<int32_t>& ids = job->inputs[job->vectors.size()];
        if (!engine_.can_embed(int64_t(ids.size()))) return;
        std::vector<float> v = pool_rows(engine_.embed(ids), engine_.model().hp.n_embd, job->pooling);
        l2_normalize(v);  // [n_embd]
        job->vectors.push_back(std::move(v));
        metrics_.prompt_tokens += int64_t(ids.size());
        if (job->vectors.size() < job->inputs.size()) continue;
        {
            std::lock_guard lock(mu_);
            job->done = true;
            std::erase(embeds_, job);  // by identity: drain may have failed and dropped it already
        }
        cv_.notify_all();
    }
}

void EngineLoop::fail_embeds(const ApiError& e) {
    {
        std::lock_guard lock(mu_);
        for (const std::shared_ptr<EmbedJob>& job : embeds_) {
            job->error = e;
            job->done = true;
        }
        embeds_.clear();
    }
    cv_.notify_all();
}

}  // namespace minfer::server
