#include "runtime/scheduler.h"

#include <algorithm>

#include "runtime/sampler.h"
#include "runtime/text_stream.h"
#include "util/error.h"

namespace minfer {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Cancelled:
            return "cancelled";
    }
    return "?";
}

// A request and its sequence: `feed` holds every token the sequence must have in the KV cache (the
// prompt, then each sampled token; after a preemption all of it is recomputed), `fed` how many it has.
struct Scheduler::Active {
    Active(uint64_t i, GenerationRequest r, const Tokenizer& tok, std::shared_ptr<const grammar::Vocab> vocab)
        : id(i),
          req(std::move(r)),
          sampler(req.gen.sampling),
          text(tok, req.gen.stop, !req.gen.special),
          feed(req.prompt) {
        for (const int32_t t : req.prompt) sampler.accept(t);
        result.prompt_tokens = int64_t(req.prompt.size());
        if (req.grammar.grammar) constraint.emplace(req.grammar, std::move(vocab));
    }
    bool masked() const { return constraint && constraint->active(); }
    int64_t remaining() const { return int64_t(feed.size()) - fed; }

    uint64_t id;
    GenerationRequest req;
    Sampler sampler;
    TextStream text;
    GenerationResult result;
    std::vector<int32_t> feed;
    int64_t fed = 0;
    SeqId seq = -1;
    bool admitted_once = false;
    std::optional<Constraint> constraint;
};

Scheduler::Scheduler(Engine& engine, const Tokenizer& tok, int64_t token_budget)
    : engine_(engine),
      tok_(tok),
      budget_(token_budget > 0 ? std::min(token_budget, engine.max_tokens()) : engine.max_tokens()) {}

Scheduler::~Scheduler() = default;

uint64_t Scheduler::submit(GenerationRequest r) {
    const auto n = int64_t(r.prompt.size());
    if (n == 0) throw Error("the prompt is empty");
    if (r.gen.n_predict <= 0)
        throw Error("max tokens must be at least 1, not " + std::to_string(r.gen.n_predict));
    if (n >= engine_.n_ctx())
        throw Error("the prompt has " + std::to_string(n) + " tokens; the context holds " +
                    std::to_string(engine_.n_ctx()) + " (prompt and at least one generated token)");
    for (const int32_t id : r.prompt)
        if (id < 0 || id >= engine_.model().hp.n_vocab)
            throw Error("token id " + std::to_string(id) + " is out of range [0, " +
                        std::to_string(engine_.model().hp.n_vocab) + ")");
    const uint64_t id = next_id_.fetch_add(1);
    std::shared_ptr<const grammar::Vocab> vocab = r.grammar.grammar ? grammar_vocab() : nullptr;
    auto a = std::make_unique<Active>(id, std::move(r), tok_, std::move(vocab));
    std::lock_guard lock(mu_);
    incoming_.push_back(std::move(a));
    return id;
}

void Scheduler::cancel(uint64_t id) {
    std::lock_guard lock(mu_);
    cancelled_.push_back(id);
}

size_t Scheduler::n_waiting() const {
    std::lock_guard lock(mu_);
    return waiting_.size() + incoming_.size();
}

void Scheduler::take_submissions() {
    std::lock_guard lock(mu_);
    for (ActivePtr& a : incoming_) waiting_.push_back(std::move(a));
    incoming_.clear();
}

void Scheduler::drop_cancelled() {
    std::vector<uint64_t> ids;
    {
        std::lock_guard lock(mu_);
        ids.swap(cancelled_);
    }
    for (const uint64_t id : ids) {
        auto is = [&](const ActivePtr& a) { return a->id == id; };
        if (auto it = std::find_if(running_.begin(), running_.end(), is); it != running_.end()) {
            finish(**it, FinishReason::Cancelled);
        } else if (auto w = std::find_if(waiting_.begin(), waiting_.end(), is); w != waiting_.end()) {
            ActivePtr a = std::move(*w);
            waiting_.erase(w);
            running_.push_back(std::move(a));  // finish() takes it from running_
            finish(*running_.back(), FinishReason::Cancelled);
        }
    }
}

// Oldest first, while a sequence slot is free and the pool holds the request's remaining tokens (after
// what the prefix cache supplies).
void Scheduler::admit() {
    while (!waiting_.empty() && int(running_.size()) < engine_.max_seqs()) {
        Active& a = *waiting_.front();
        a.seq = engine_.open();
        a.fed = engine_.attach_prefix(a.seq, a.feed);
        if (engine_.blocks_needed(a.seq, a.remaining()) > engine_.free_blocks() && !running_.empty()) {
            engine_.close(a.seq);
            a.seq = -1;
            a.fed = 0;
            return;
        }
        if (!a.admitted_once) a.result.cached_tokens = a.fed;
        a.admitted_once = true;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
}

void Scheduler::preempt_youngest() {
    ActivePtr a = std::move(running_.back());
    running_.pop_back();
    engine_.close(a->seq);
    a->seq = -1;
    a->fed = 0;
    ++preemptions_;
    waiting_.push_front(std::move(a));
}

// Decode tokens first (one per sequence), then prefill chunks in admission order, under the budget.
// False when the batch cannot get its blocks (the caller preempts and retries).
bool Scheduler::build_batch(std::vector<Engine::Chunk>& batch, std::vector<Active*>& owners) {
    batch.clear();
    owners.clear();
    int64_t left = budget_, blocks = 0;
    for (const bool decode : {true, false})
        for (const ActivePtr& a : running_) {
            if ((a->remaining() == 1) != decode || left == 0) continue;
            const int64_t n = std::min(a->remaining(), left);
            const std::span<const int32_t> feed(a->feed);
            batch.push_back({a->seq, feed.subspan(size_t(a->fed), size_t(n)), n == a->remaining() ? 1 : 0});
            owners.push_back(a.get());
            blocks += engine_.blocks_needed(a->seq, n);
            left -= n;
        }
    return blocks <= engine_.free_blocks();
}

bool Scheduler::step() {
    take_submissions();
    drop_cancelled();
    admit();
    if (running_.empty()) return false;
    std::vector<Engine::Chunk> batch;
    std::vector<Active*> owners;
    while (!build_batch(batch, owners)) preempt_youngest();
    if (batch.empty()) return true;  // everything was preempted: the next step readmits
    std::vector<Active*> rows;       // the sequences whose logits row comes next, in row order
    for (size_t i = 0; i < batch.size(); ++i)
        if (batch[i].n_logits > 0) rows.push_back(owners[i]);
    std::vector<Draw> draws = forward_and_draw(batch, rows);
    for (size_t i = 0; i < batch.size(); ++i) owners[i]->fed += int64_t(batch[i].tokens.size());
    for (size_t r = 0; r < rows.size(); ++r) take(*rows[r], std::move(draws[r]));
    return true;
}

// When every row's sampler takes the argmax of the raw logits, the engine picks the tokens where the
// logits are (a GPU sends back B ids, not B rows of the vocabulary); the same tokens either way.
// Otherwise rows are drawn on the engine's host threads (B rows of a 152k vocabulary are B passes over
// 600 KB each): every sampler is its own sequence's, so no token depends on which thread drew it.
std::vector<Scheduler::Draw> Scheduler::forward_and_draw(std::span<const Engine::Chunk> batch,
                                                         std::span<Active* const> rows) {
    std::vector<Draw> draws(rows.size());
    auto on_device = [](const Active* a) {
        return a->sampler.is_argmax() && !a->masked() && (a->req.n_logprobs < 0 || !a->req.on_logprob);
    };
    if (std::all_of(rows.begin(), rows.end(), on_device)) {
        const std::span<const int32_t> ids = engine_.forward_greedy(batch);
        for (size_t r = 0; r < rows.size(); ++r)
            draws[r] = {ids[r], tok_.is_eog(ids[r]) && !rows[r]->req.gen.ignore_eos, std::nullopt};
        return draws;
    }
    const std::span<const float> logits = engine_.forward(batch);
    const auto n_vocab = size_t(engine_.model().hp.n_vocab);
    engine_.host_threads().for_each_dynamic(int64_t(rows.size()), [&](int64_t r, int) {
        draws[size_t(r)] = draw(*rows[size_t(r)], logits.subspan(size_t(r) * n_vocab, n_vocab));
    });
    return draws;
}

// A masked row samples among the tokens its grammar allows; one whose grammar allows none (a vocabulary
// that cannot spell what the grammar needs) stops there rather than writing outside it.
Scheduler::Draw Scheduler::draw(Active& a, std::span<const float> logits) const {
    const std::span<const float> row = a.masked() ? a.constraint->mask(logits) : logits;
    if (row.empty()) return {-1, true, std::nullopt};
    Draw d{a.sampler.sample(row), false, std::nullopt};
    d.stops = tok_.is_eog(d.id) && !a.req.gen.ignore_eos;
    if (!d.stops && a.req.n_logprobs >= 0 && a.req.on_logprob)
        d.logprob = token_logprob(logits, d.id, a.req.n_logprobs);
    return d;
}

void Scheduler::take(Active& a, Draw d) {
    const int32_t id = d.id;
    if (d.stops) return finish(a, FinishReason::Stop);
    if (d.logprob) a.req.on_logprob(*d.logprob);
    a.sampler.accept(id);
    if (a.constraint) a.constraint->accept(id, tok_.is_special(id) ? std::string() : tok_.token_to_bytes(id));
    a.result.ids.push_back(id);
    if (a.text.feed(id)) return finish(a, FinishReason::Stop);
    if (const std::string_view piece = a.text.take(); !piece.empty() && a.req.on_text) a.req.on_text(piece);
    if (int64_t(a.result.ids.size()) >= a.req.gen.n_predict || engine_.n_past(a.seq) >= engine_.n_ctx())
        return finish(a, FinishReason::Length);
    a.feed.push_back(id);
}

void Scheduler::finish(Active& a, FinishReason why) {
    if (const std::string_view rest = a.text.finish(); !rest.empty() && a.req.on_text) a.req.on_text(rest);
    a.result.text = a.text.text();
    a.result.finish = why;
    if (a.seq >= 0) engine_.close(a.seq);
    a.seq = -1;
    const auto it =
        std::find_if(running_.begin(), running_.end(), [&](const ActivePtr& p) { return p.get() == &a; });
    ActivePtr done = std::move(*it);
    running_.erase(it);
    if (done->req.on_done) done->req.on_done(done->result);
}

std::shared_ptr<const grammar::Vocab> Scheduler::grammar_vocab() {
    std::call_once(vocab_once_, [&] {
        std::vector<std::string> bytes(size_t(tok_.n_vocab()));
        std::vector<int32_t> eog;
        for (int32_t id = 0; id < tok_.n_vocab(); ++id) {
            if (!tok_.is_special(id)) bytes[size_t(id)] = tok_.token_to_bytes(id);
            if (tok_.is_eog(id)) eog.push_back(id);
        }
        vocab_ = std::make_shared<const grammar::Vocab>(std::move(bytes), std::move(eog));
    });
    return vocab_;
}

void Scheduler::run_until_idle() {
    while (step()) {
    }
}

}  // namespace minfer
