// minfer bench: prompt-processing (ppP) and token-generation (tgN) throughput with llama-bench's meaning.
// ppP prefills P random token ids into an empty context; tgN decodes N tokens one at a time from an empty
// context. With -d D (llama-bench's --n-depth) each repetition first prefills D random ids, untimed, so
// the test runs at depth D ("tg128 @ d4096"). Each test runs one untimed warm-up, then r timed
// repetitions reported as tok/s mean ± sd.
//
// With --parallel B1,B2,... it measures batched throughput with llama-batched-bench's meaning instead:
// for each B, B sequences prefill P = -p tokens each (packed several to a forward pass as the
// micro-batch allows), then run N = -n decode steps in which each of the B sequences gets one token per
// pass; S_PP = B*P / t_pp, S_TG = B*N / t_tg and S = B*(P+N) / (t_pp + t_tg).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <thread>

#include "common.h"
#include "graph/graph.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "util/error.h"

namespace minfer {

namespace {

struct BenchOptions {
    std::string model;
    int64_t n_prompt = 512, n_gen = 128, depth = 0, n_ubatch = kDefaultUbatch;
    int threads = 0, reps = 5, tensor_parallel = 1;
    BackendKind device = BackendKind::Cpu;
    GgmlType kv_type = GgmlType::F32;
    bool json = false, deterministic = false;
    std::vector<int> parallel;  // --parallel: the batched mode, one row per sequence count
};

struct Stat {
    std::string test;  // "pp512", "tg128"
    double mean = 0, sd = 0;
};

// Seconds one repetition takes after the untimed prefill of `context`: prefill of all `ids` at once, or
// one forward per id.
double time_rep(Session& s, const std::vector<int32_t>& context, const std::vector<int32_t>& ids,
                bool prefill) {
    s.reset();
    if (!context.empty()) forward_in_passes(s, context, "depth", progress_wanted(), int64_t(context.size()));
    const auto t0 = std::chrono::steady_clock::now();
    if (prefill) {
        s.forward(ids, 1);
    } else {
        for (const int32_t& id : ids) s.forward({&id, 1}, 1);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Stat run_test(Session& s, const std::string& name, const std::vector<int32_t>& context,
              const std::vector<int32_t>& ids, bool prefill, int reps) {
    time_rep(s, context, ids, prefill);  // warm-up: builds the graphs, pages in the weights
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r)
        rates.push_back(double(ids.size()) / std::max(time_rep(s, context, ids, prefill), 1e-12));
    Stat st{name};
    for (double v : rates) st.mean += v / double(rates.size());
    double ss = 0;
    for (double v : rates) ss += (v - st.mean) * (v - st.mean);
    st.sd = rates.size() > 1 ? std::sqrt(ss / double(rates.size() - 1)) : 0.0;
    return st;
}

std::vector<int32_t> random_ids(int64_t n, int64_t n_vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> dist(0, int32_t(n_vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = dist(rng);
    return ids;
}

void print_table(const std::string& path, int threads, int64_t depth, const std::vector<Stat>& stats) {
    const std::string at = depth > 0 ? " @ d" + std::to_string(depth) : "";
    const std::string name = std::filesystem::path(path).filename().string();
    std::printf("| model | threads | test | t/s |\n| --- | ---: | ---: | ---: |\n");
    for (const Stat& st : stats)
        std::printf("| %s | %d | %s%s | %.2f ± %.2f |\n", name.c_str(), threads, st.test.c_str(), at.c_str(),
                    st.mean, st.sd);
}

// Runs each sequence's span of ids in as few forward passes as the micro-batch allows: a pass takes
// tokens in sequence order until it holds max_tokens(), so a span may straddle two passes (a sequence
// still appears at most once in each, as Engine::forward asks). The chunk that ends a span wants its
// logits, as serving would: a prompt's last token samples the first decode token, a decode token the next.
void forward_packed(Engine& e, std::span<const SeqId> seqs, std::span<const std::span<const int32_t>> ids) {
    std::vector<Engine::Chunk> batch;
    int64_t room = e.max_tokens();
    for (size_t i = 0; i < seqs.size(); ++i) {
        for (std::span<const int32_t> rest = ids[i]; !rest.empty();) {
            const auto n = size_t(std::min<int64_t>(room, int64_t(rest.size())));
            batch.push_back({seqs[i], rest.first(n), n == rest.size() ? 1 : 0});
            rest = rest.subspan(n);
            room -= int64_t(n);
            if (room == 0) {
                e.forward(batch);
                batch.clear();
                room = e.max_tokens();
            }
        }
    }
    if (!batch.empty()) e.forward(batch);
}

struct PhaseTimes {
    double pp = 0, tg = 0;  // seconds
};

template <class F>
double seconds(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One batched pass on fresh sequences: B = n_seqs prefill their n_prompt ids of `pp` (timed as t_pp),
// then n_gen steps give each sequence its next id of `tg` (timed as t_tg). A skipped phase (P = 0, as
// llama-batched-bench's npp 0, or N = 0) takes exactly 0 s. The sequences are closed after.
PhaseTimes time_batched(Engine& e, int n_seqs, std::span<const int32_t> pp, int64_t n_prompt,
                        std::span<const int32_t> tg, int64_t n_gen) {
    std::vector<SeqId> seqs;
    std::vector<std::span<const int32_t>> ids;
    for (int i = 0; i < n_seqs; ++i) {
        seqs.push_back(e.open());
        ids.push_back(pp.subspan(size_t(i * n_prompt), size_t(n_prompt)));
    }
    PhaseTimes t;
    if (n_prompt > 0) t.pp = seconds([&] { forward_packed(e, seqs, ids); });
    if (n_gen > 0)
        t.tg = seconds([&] {
            for (int64_t step = 0; step < n_gen; ++step) {
                for (int i = 0; i < n_seqs; ++i) ids[size_t(i)] = tg.subspan(size_t(step * n_seqs + i), 1);
                forward_packed(e, seqs, ids);
            }
        });
    for (const SeqId s : seqs) e.close(s);
    return t;
}

struct BatchedRow {
    int64_t pp, tg, pl, n_kv_max;
    PhaseTimes t;  // mean over the repetitions
};

// B sequences on an engine of their own: max_seqs = B and a KV cache (shared by all sequences, like
// llama.cpp's unified KV) of B * (P + N) slots, each sequence's share rounded up to whole blocks. One
// untimed warm-up pass with a single decode step builds every graph the timed passes use (the prefill
// buckets and the B-token decode step) and pages in the weights.
BatchedRow bench_batched_at(const Model& m, const BenchOptions& o, int threads, int n_seqs) {
    const int64_t per_seq = (o.n_prompt + o.n_gen + kDefaultKvBlock - 1) / kDefaultKvBlock * kDefaultKvBlock;
    Engine e(m, EngineParams{.n_ctx = n_seqs * per_seq,
                             .n_threads = threads,
                             .device = o.device,
                             .n_ubatch = o.n_ubatch,
                             .max_seqs = n_seqs,
                             .kv_type = o.kv_type,
                             .batch_invariant = o.deterministic,
                             .tensor_parallel = o.tensor_parallel});
    std::mt19937 rng(1234);
    const std::vector<int32_t> pp = random_ids(n_seqs * o.n_prompt, m.hp.n_vocab, rng);
    const std::vector<int32_t> tg = random_ids(n_seqs * o.n_gen, m.hp.n_vocab, rng);
    time_batched(e, n_seqs, pp, o.n_prompt, tg, std::min<int64_t>(o.n_gen, 1));
    BatchedRow row{o.n_prompt, o.n_gen, n_seqs, e.n_ctx(), {}};
    for (int r = 0; r < o.reps; ++r) {
        const PhaseTimes t = time_batched(e, n_seqs, pp, o.n_prompt, tg, o.n_gen);
        row.t.pp += t.pp / o.reps;
        row.t.tg += t.tg / o.reps;
    }
    return row;
}

// Tokens per second, 0 for a skipped phase (P = 0 or N = 0).
double rate(int64_t tokens, double seconds) {
    return tokens > 0 && seconds > 0 ? double(tokens) / seconds : 0.0;
}

void print_batched_header(const std::string& path, int threads, const BenchOptions& o) {
    std::printf("model: %s, threads: %d, device: %s, n_ubatch: %lld, reps: %d (mean seconds per phase)\n\n",
                std::filesystem::path(path).filename().string().c_str(), threads, backend_name(o.device),
                static_cast<long long>(o.n_ubatch), o.reps);
    std::printf(
        "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |"
        "    S t/s |\n|-------|--------|------|--------|----------|----------|----------|----------|"
        "----------|----------|\n");
}

void print_batched_row(const BatchedRow& r) {
    const int64_t n_kv = r.pl * (r.pp + r.tg);
    std::printf("| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n",
                static_cast<long long>(r.pp), static_cast<long long>(r.tg), static_cast<long long>(r.pl),
                static_cast<long long>(n_kv), r.t.pp, rate(r.pl * r.pp, r.t.pp), r.t.tg,
                rate(r.pl * r.tg, r.t.tg), r.t.pp + r.t.tg, rate(n_kv, r.t.pp + r.t.tg));
    std::fflush(stdout);
}

// llama-batched-bench's jsonl fields (pp, tg, pl, n_kv, t_pp, speed_pp, ...), in its order, after this
// bench's own.
void print_batched_json(const std::string& path, int threads, const BenchOptions& o, const BatchedRow& r) {
    const int64_t n_kv = r.pl * (r.pp + r.tg);
    const nlohmann::ordered_json j{{"model", path},
                                   {"threads", threads},
                                   {"device", backend_name(o.device)},
                                   {"n_ubatch", o.n_ubatch},
                                   {"n_kv_max", r.n_kv_max},
                                   {"reps", o.reps},
                                   {"pp", r.pp},
                                   {"tg", r.tg},
                                   {"pl", r.pl},
                                   {"n_kv", n_kv},
                                   {"t_pp", r.t.pp},
                                   {"speed_pp", rate(r.pl * r.pp, r.t.pp)},
                                   {"t_tg", r.t.tg},
                                   {"speed_tg", rate(r.pl * r.tg, r.t.tg)},
                                   {"t", r.t.pp + r.t.tg},
                                   {"speed", rate(n_kv, r.t.pp + r.t.tg)}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

// Rows are printed as each B finishes: a long sweep shows its progress.
void bench_batched(const Model& m, const std::string& path, int threads, const BenchOptions& o) {
    if (!o.json) print_batched_header(path, threads, o);
    for (const int n_seqs : o.parallel) {
        const BatchedRow row = bench_batched_at(m, o, threads, n_seqs);
        if (o.json)
            print_batched_json(path, threads, o, row);
        else
            print_batched_row(row);
    }
}

void bench(const BenchOptions& o) {
    if (o.n_prompt == 0 && o.n_gen == 0) throw Error("nothing to bench: -p and -n are both 0");
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const auto model = load_model(path, o.device);
    const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    if (!o.parallel.empty()) return bench_batched(*model, path, threads, o);
    Session session(*model, {o.depth + std::max(o.n_prompt, o.n_gen), threads, o.device, o.n_ubatch,
                             o.deterministic, o.kv_type, 0, o.tensor_parallel});
    std::mt19937 rng(1234);
    const std::vector<int32_t> pp = random_ids(o.n_prompt, model->hp.n_vocab, rng);
    const std::vector<int32_t> tg = random_ids(o.n_gen, model->hp.n_vocab, rng);
    const std::vector<int32_t> context = random_ids(o.depth, model->hp.n_vocab, rng);
    std::vector<Stat> stats;
    if (o.n_prompt > 0)
        stats.push_back(run_test(session, "pp" + std::to_string(o.n_prompt), context, pp, true, o.reps));
    if (o.n_gen > 0)
        stats.push_back(run_test(session, "tg" + std::to_string(o.n_gen), context, tg, false, o.reps));
    if (!o.json) return print_table(path, threads, o.depth, stats);
    nlohmann::json j{
        {"model", path}, {"threads", threads}, {"device", backend_name(o.device)}, {"depth", o.depth}};
    for (const Stat& st : stats) j[st.test] = {{"mean", st.mean}, {"sd", st.sd}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* c = app.add_subcommand(
        "bench",
        "Measure prefill (ppP) and decode (tgN) speed, as llama-bench; with --parallel, batched "
        "throughput as llama-batched-bench");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens to prefill, per sequence (0: skip)")
        ->check(int_in(0, 1 << 20));
    c->add_option("-n,--n-gen", o->n_gen, "Tokens to generate one at a time, per sequence (0: skip)")
        ->check(int_in(0, 1 << 20));
    CLI::Option* depth =
        c->add_option("-d,--n-depth", o->depth, "Context tokens prefilled (untimed) before each test")
            ->check(int_in(0, 1 << 20));
    c->add_option("--parallel", o->parallel,
                  "Batched mode (llama-batched-bench's -npl), for each B in a comma-separated list: B "
                  "sequences prefill -p tokens each, then -n steps decode one token per sequence; prints "
                  "T_PP, S_PP, T_TG, S_TG, T, S per B. Times are the mean of -r repetitions (default 1 "
                  "here), after one untimed warm-up pass at each B")
        ->delimiter(',')
        ->check(int_in(1, 1 << 16))
        ->excludes(depth);
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    add_kv_type_option(*c, o->kv_type);
    add_tensor_parallel_option(*c, o->tensor_parallel);
    CLI::Option* reps = c->add_option("-r,--repetitions", o->reps, "Timed repetitions per test (default 5)")
                            ->check(int_in(1, 1 << 20));
    c->add_flag("--deterministic", o->deterministic, "Batch-invariant arithmetic (see run --deterministic)");
    c->add_flag("--json", o->json,
                "Print one JSON object {model, threads, device, depth, ppP: {mean, sd}, tgN: {mean, sd}}; "
                "with --parallel one per B, named as llama-batched-bench's jsonl: "
                "{pp, tg, pl, n_kv, t_pp, speed_pp, t_tg, speed_tg, t, speed, ...}");
    c->callback([o, reps] {
        if (!o->parallel.empty() && reps->count() == 0) o->reps = 1;
        bench(*o);
    });
}

}  // namespace minfer
