#include "common.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <random>
#include <string_view>

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
        std::isinf(lo) && std::isinf(hi) ? "finite"
                                         : "in [" + format_bound(lo) + ", " + format_bound(hi) + "]");
}

CLI::Validator n_predict_check() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            int64_t v = 0;
            const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || ptr != s.data() + s.size() || v < -1 || v > kUntilTheEnd)
                return "expected -1 (until the end of generation or context) or 0.." +
                       std::to_string(kUntilTheEnd) + ", got '" + s + "'";
            if (v == -1) s = std::to_string(kUntilTheEnd);
            return {};
        },
        "");
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
    constexpr double kAny = HUGE_VAL;
    c.add_option("--temp", p.temp, "Temperature (<= 0: greedy)")
        ->check(float_in(-kAny, kAny))
        ->capture_default_str();
    c.add_option("--top-k", p.top_k, "Top-k (0: off)")->check(int_in(0, 1 << 30))->capture_default_str();
    c.add_option("--top-p", p.top_p, "Top-p (1: off)")->check(float_in(0.0, 1.0))->capture_default_str();
    c.add_option("--min-p", p.min_p, "Min-p (0: off)")->check(float_in(0.0, 1.0))->capture_default_str();
    c.add_option("--repeat-penalty", p.repeat_penalty, "Repetition penalty (1: off)")
        ->check(float_in(0.0, 100.0))
        ->capture_default_str();
    c.add_option("--presence-penalty", p.presence_penalty, "Presence penalty (0: off)")
        ->check(float_in(-kAny, kAny))
        ->capture_default_str();
    c.add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty (0: off)")
        ->check(float_in(-kAny, kAny))
        ->capture_default_str();
    // As llama.cpp: a random seed unless one is given (-1 also draws one); the commands print it.
    p.seed = random_seed();
    c.add_option("--seed", p.seed, "Sampling seed (default: random; -1: random)")
        ->type_name("INT")
        ->transform(CLI::Validator(
            [](std::string& s) -> std::string {
                uint64_t v = 0;
                const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
                if (s == "-1")
                    s = std::to_string(random_seed());
                else if (ec != std::errc() || ptr != s.data() + s.size())
                    return "expected -1 (random) or an integer in 0..2^64-1, got '" + s + "'";
                return {};
            },
            ""));
}

uint64_t random_seed() {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
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

void warn_beyond_training(const Model& m, int64_t n_ctx) {
    if (n_ctx > m.hp.n_ctx_train)
        std::fprintf(stderr,
                     "warning: -c %lld is beyond the %lld tokens the model was trained on; output past them "
                     "may degrade\n",
                     static_cast<long long>(n_ctx), static_cast<long long>(m.hp.n_ctx_train));
}

// The embedded default model: MINFER_DEFAULT_MODEL, else beside an installed binary
// (<prefix>/bin/minfer -> <prefix>/share/minfer/), else in the source tree the binary was built from.
std::span<const float> forward_in_passes(Session& s, std::span<const int32_t> ids, const char* what,
                                         bool progress, int64_t total) {
    const auto n = int64_t(ids.size()), pass = s.engine().max_tokens();
    progress = progress && n > pass;
    std::span<const float> logits;
    for (int64_t done = 0; done < n;) {
        const int64_t k = std::min(pass, n - done);
        logits = s.forward(std::span<const int32_t>(ids.data() + done, size_t(k)), 1);
        done += k;
        if (progress)
            std::fprintf(stderr, "\r%s: %lld/%lld tokens", what, static_cast<long long>(done),
                         static_cast<long long>(total));
    }
    if (progress) std::fputc('\n', stderr);
    return logits;
}

bool progress_wanted() {
    return isatty(STDERR_FILENO);
}

std::string read_text_file(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open the " + what + " file");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw Error(path + ": read failed");
    return text;
}

std::string default_model_path() {
    const char* env = std::getenv("MINFER_DEFAULT_MODEL");
    if (env && *env) return env;
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const fs::path installed = exe.parent_path().parent_path() / MINFER_INSTALLED_MODEL;
    if (!ec && fs::is_regular_file(installed, ec)) return installed.string();
    if (fs::is_regular_file(MINFER_SOURCE_MODEL, ec)) return MINFER_SOURCE_MODEL;
    throw Error("no model given and the default one is in neither " + installed.string() + " nor " +
                MINFER_SOURCE_MODEL + ": pass -m MODEL.gguf, or install minfer with cmake --install");
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

namespace {

// Maps a case-insensitive name to its enum value (as the integer CLI11 converts); the error and the
// help list the names.
template <typename E>
CLI::Validator one_of(std::vector<std::pair<std::string, E>> choices) {
    return CLI::Validator(
        [choices](std::string& s) -> std::string {
            std::string lower = s;
            for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
            std::string names;
            for (const auto& [name, value] : choices) {
                if (lower == name) {
                    s = std::to_string(static_cast<int64_t>(value));
                    return {};
                }
                names += (names.empty() ? "" : ", ") + name;
            }
            return "expected one of " + names + ", got '" + s + "'";
        },
        "");
}

}  // namespace

void add_kv_type_option(CLI::App& app, GgmlType& type) {
    app.add_option("--kv-type", type, "KV cache element type (CPU)")
        ->type_name("f32|f16|q8_0")
        ->default_str("f32")
        ->transform(
            one_of<GgmlType>({{"f32", GgmlType::F32}, {"f16", GgmlType::F16}, {"q8_0", GgmlType::Q8_0}}));
}

void add_tensor_parallel_option(CLI::App& app, int& ranks) {
    app.add_option(
           "--tensor-parallel", ranks,
           "Split the model over N ranks (attention heads, FFN columns, vocabulary), each on its own "
           "thread with its own KV cache; with --device cuda rank r on GPU r, the collectives through "
           "NCCL (through host memory when the GPUs are fewer than N)")
        ->type_name("N")
        ->capture_default_str()
        ->check(int_in(1, 64));
}

void add_kv_mem_option(CLI::App& app, int64_t& bytes) {
    app.add_option("--kv-mem", bytes, "KV cache size in bytes (4G, 512M; overrides -c): tokens it holds")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::PositiveNumber);
}

void add_device_option(CLI::App& app, BackendKind& device) {
    CLI::Option* dev =
        app.add_option("--device", device, "Where to run")
            ->type_name("cpu|cuda")
            ->default_str("cpu")
            ->transform(one_of<BackendKind>({{"cpu", BackendKind::Cpu}, {"cuda", BackendKind::Cuda}}));
    // llama.cpp's -ngl N / --n-gpu-layers N: N > 0 runs every layer on the GPU (--device cuda).
    app.add_option_function<int64_t>(
           "--n-gpu-layers,--gpu-layers",
           [&device](int64_t n) { device = n > 0 ? BackendKind::Cuda : BackendKind::Cpu; },
           "As llama.cpp: N > 0 means --device cuda (all layers), 0 --device cpu")
        ->type_name("N")
        ->check(int_in(-1, 1 << 20))
        ->excludes(dev);
}

namespace {

// Single-dash spellings of llama.cpp that CLI11 cannot take (its short names are one letter).
struct Alias {
    const char* from;
    const char* to;
};
constexpr Alias kAliases[] = {{"-sys", "--system"},     {"-ngl", "--n-gpu-layers"},
                              {"-np", "--parallel"},    {"-tp", "--tensor-parallel"},
                              {"-ub", "--ubatch-size"}, {"-no-cnv", "--no-template"}};

// -ab..., not a negative number (-nan and -inf are values, which the numeric checks reject).
bool is_multi_letter_flag(std::string_view a) {
    std::string lower(a);
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "-nan" || lower == "-inf" || lower == "-infinity") return false;
    if (a.size() < 3 || a[0] != '-' || !std::isalpha(static_cast<unsigned char>(a[1]))) return false;
    return std::all_of(a.begin() + 1, a.end(), [](char c) {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
}

std::string command_list(const CLI::App& app) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
    return names;
}

// CLI11's messages with the "error: " prefix every other failure has; an unexpected word where a
// command belongs is an unknown command, an unexpected dash argument an unknown option.
std::string failure_message(const CLI::App* app, const CLI::Error& e) {
    std::string msg = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
        const std::vector<std::string> rest = app->remaining(true);
        const bool no_command = app->get_subcommands().empty();
        if (!rest.empty() && no_command && rest[0].rfind('-', 0) != 0)
            msg = "unknown command '" + rest[0] + "' (commands: " + command_list(*app) + ")";
        else if (!rest.empty() && rest[0].rfind('-', 0) == 0)
            msg = "unknown option '" + rest[0] + "'";
    }
    return "error: " + msg + "\nRun with --help for more information.\n";
}

}  // namespace

void normalize_args(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--") return;
        if (!is_multi_letter_flag(a)) continue;
        const Alias* alias = nullptr;
        for (const Alias& al : kAliases)
            if (a == al.from) alias = &al;
        if (!alias) {
            const std::string hint = a == "-cnv" ? " (for a conversation use 'minfer chat')" : "";
            throw Error(
                "unknown option '" + std::string(a) + "'" + hint +
                " (short options are one letter; llama.cpp spellings taken: -sys, -ngl, -ub, -np, -no-cnv)");
        }
        argv[i] = const_cast<char*>(alias->to);
    }
}

void configure_app(CLI::App& app) {
    app.failure_message(failure_message);
#ifdef MINFER_HAVE_CUDA
    constexpr const char* kCuda = "with CUDA";
#else
    constexpr const char* kCuda = "without CUDA";
#endif
    app.set_version_flag("--version", std::string("minfer (built ") + __DATE__ + ", " + kCuda + ")");
}

}  // namespace minfer
