#include "common.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <unistd.h>

#include <cstdio>

#include "gguf/gguf.h"
#include "graph/dump.h"
#include "graph/graph.h"
#include "models/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "util/error.h"

namespace minfer {

std::vector<int32_t> parse_ids(const std::string& s, const char* flag) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t end = std::min(s.find(',', i), s.size());
        int32_t v = 0;
        const char *b = s.data() + i, *e = s.data() + end;
        while (b < e && *b == ' ') ++b;
        const auto [ptr, ec] = std::from_chars(b, e, v);
        if (ec != std::errc() || ptr != e || b == e)
            throw Error(std::string(flag) + ": expected comma-separated token ids, got '" + s + "'");
        ids.push_back(v);
        i = end + 1;
    }
    return ids;
}

namespace {

std::string format_bound(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

CLI::Validator int_in(int64_t lo, int64_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            int64_t v = 0;
            const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || ptr != s.data() + s.size())
                return "expected an integer, got '" + s + "'";
            if (v < lo || v > hi)
                return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s;
            return {};
        },
        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator float_in(double lo, double hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            double v = 0;
            const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v))
                return "expected a finite number, got '" + s + "'";
            if (v < lo || v > hi)
                return "must be between " + format_bound(lo) + " and " + format_bound(hi) + ", got " + s;
            return {};
        },
        "FLOAT in [" + format_bound(lo) + ", " + format_bound(hi) + "]");
}

namespace {

void draw_progress(size_t done, size_t total, void*) {
    constexpr int kWidth = 40;
    const int filled = total ? int(double(done) / double(total) * kWidth) : kWidth;
    std::fprintf(stderr, "\rloading [%s%s] %zu/%zu MB", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(kWidth - filled), ' ').c_str(), done >> 20, total >> 20);
    if (done == total) std::fputc('\n', stderr);
}

}  // namespace

void add_sampling_options(CLI::App& c, SamplerParams& p) {
    // Every float is checked finite (NaN passes any comparison-based range check).
    c.add_option("--temp", p.temp, "Temperature (<= 0: greedy)")->check(float_in(-1e6, 1e6));
    c.add_option("--top-k", p.top_k, "Top-k (0: off)")->check(int_in(0, 1 << 30));
    c.add_option("--top-p", p.top_p, "Top-p (1: off)")->check(float_in(0.0, 1.0));
    c.add_option("--min-p", p.min_p, "Min-p (0: off)")->check(float_in(0.0, 1.0));
    c.add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)")
        ->check(float_in(0.0, 100.0));
    c.add_option("--presence-penalty", p.presence_penalty, "Presence penalty (0: off)")
        ->check(float_in(-1e6, 1e6));
    c.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty (0: off)")
        ->check(float_in(-1e6, 1e6));
    c.add_option("--seed", p.seed, "Sampling seed");
}

std::unique_ptr<Model> load_model(const std::string& path, BackendKind device) {
    const std::string file = path.empty() ? default_model_path() : path;
    constexpr size_t kBigModel = size_t(100) << 20;
    std::error_code ec;
    const bool big = std::filesystem::file_size(file, ec) > kBigModel && !ec;
    const LoadProgress progress{big && isatty(2) ? draw_progress : nullptr, nullptr};
    const Residency where = device == BackendKind::Cpu ? Residency::huge_pages : Residency::mapped;
    auto model = Model::from_file(GgufFile::open(file, where, progress));
    if (big && model->file->residency() == Residency::mapped) model->file->prefetch(progress);
    return model;
}

std::string default_model_path() {
    const char* env = std::getenv("MINFER_DEFAULT_MODEL");
    return env && *env ? env : MINFER_DEFAULT_MODEL;
}

void GraphDumpOptions::add_to(CLI::App& app) {
    app.add_option("--dump-graph", dot_path, "Write the compute graph as Graphviz DOT and exit");
    app.add_option("--dump-graph-json", json_path, "Write the compute graph as JSON and exit");
}

void dump_graph(Session& s, const GraphParams& p, const GraphDumpOptions& o) {
    const ComputeGraph g = s.planned_graph(p);
    auto write = [&](const std::string& path, auto&& fn) {
        if (path.empty()) return;
        std::ofstream f(path);
        if (!f) throw Error(path + ": cannot open for writing");
        fn(f);
        if (!f) throw Error(path + ": write failed");
    };
    write(o.dot_path, [&](std::ostream& f) { write_dot(f, g); });
    write(o.json_path, [&](std::ostream& f) { write_json(f, g, p); });
    std::cout << "graph: " << g.nodes.size() << " nodes\n";
}

void add_ubatch_option(CLI::App& app, int64_t& n_ubatch) {
    app.add_option("--ubatch-size", n_ubatch,
                   "Most prompt tokens per forward pass; longer prompts run in passes of this size")
        ->capture_default_str()
        ->check(int_in(1, 1 << 20));
}

void add_kv_type_option(CLI::App& app, GgmlType& type) {
    static const std::map<std::string, GgmlType> types{
        {"f32", GgmlType::F32}, {"f16", GgmlType::F16}, {"q8_0", GgmlType::Q8_0}};
    app.add_option("--kv-type", type, "KV cache element type: f32, f16 or q8_0 (default: f32; CPU)")
        ->transform(CLI::CheckedTransformer(types, CLI::ignore_case));
}

void add_kv_mem_option(CLI::App& app, int64_t& bytes) {
    app.add_option("--kv-mem", bytes, "KV cache size in bytes (4G, 512M; overrides -c): tokens it holds")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::PositiveNumber);
}

void add_device_option(CLI::App& app, BackendKind& device) {
    static const std::map<std::string, BackendKind> kinds{{"cpu", BackendKind::Cpu},
                                                          {"cuda", BackendKind::Cuda}};
    app.add_option("--device", device, "Where to run: cpu or cuda (default: cpu)")
        ->transform(CLI::CheckedTransformer(kinds, CLI::ignore_case));
}

}  // namespace minfer
