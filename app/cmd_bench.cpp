// minfer bench: prompt-processing (ppP) and token-generation (tgN) throughput with llama-bench's meaning.
// ppP prefills P random token ids into an empty context; tgN decodes N tokens one at a time from an empty
// context. With -d D (llama-bench's --n-depth) each repetition first prefills D random ids, untimed, so
// the test runs at depth D ("tg128 @ d4096"). Each test runs one untimed warm-up, then r timed
// repetitions reported as tok/s mean ± sd.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common.h"
#include "graph/graph.h"
#include "models/model.h"
#include "runtime/session.h"
#include "util/error.h"

namespace minfer {

namespace {

struct BenchOptions {
    std::string model;
    int64_t n_prompt = 512, n_gen = 128, depth = 0, n_ubatch = kDefaultUbatch;
    int threads = 0, reps = 5;
    BackendKind device = BackendKind::Cpu;
    bool json = false;
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
    if (!context.empty()) s.forward(context, 1);
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

void bench(const BenchOptions& o) {
    if (o.n_prompt == 0 && o.n_gen == 0) throw Error("nothing to bench: -p and -n are both 0");
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const auto model = load_model(path, o.device);
    const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    Session session(*model, {o.depth + std::max(o.n_prompt, o.n_gen), threads, o.device, o.n_ubatch});
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
    CLI::App* c = app.add_subcommand("bench", "Measure prefill (ppP) and decode (tgN) speed, as llama-bench");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("-p,--n-prompt", o->n_prompt, "Prompt tokens to prefill (0: skip)")
        ->check(int_in(0, 1 << 20));
    c->add_option("-n,--n-gen", o->n_gen, "Tokens to generate one at a time (0: skip)")
        ->check(int_in(0, 1 << 20));
    c->add_option("-d,--n-depth", o->depth, "Context tokens prefilled (untimed) before each test")
        ->check(int_in(0, 1 << 20));
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    c->add_option("-r,--repetitions", o->reps, "Timed repetitions per test")->check(int_in(1, 1 << 20));
    c->add_flag("--json", o->json,
                "Print one JSON object {model, threads, device, depth, ppP: {mean, sd}, tgN: {mean, sd}}");
    c->callback([o] { bench(*o); });
}

}  // namespace minfer
