// bench_structured MODEL.gguf: the cost of structured output in batched decode (issue 54). For each B,
// B requests of P random prompt ids go through one Scheduler together and generate N tokens each (end
// of generation ignored), once without a grammar and once with a JSON schema on every sequence; S_TG =
// B x (N - 1) / the time of the N - 1 pure decode steps (the first step prefills every prompt at once
// and samples each sequence's first token: n_ubatch is raised to B x P for that). Both runs use the
// same engine, interleaved, after an untimed warm-up of each.
//
// The mask's share is measured outside the library: each schema run's tokens are replayed through a
// Constraint of its own (the scheduler's type, on the scheduler's vocabulary), timing Constraint::mask
// at every state the run passed through (the median of --mask-reps calls on a fixed logits row), the
// Matcher's fill_mask alone in the same state, and Constraint::accept. Per step the scheduler masks B
// rows on the engine's T host threads (for_each_dynamic), so the mask's wall time per step is taken as
// the B rows' sum / min(B, T); accept runs on the scheduler's thread, once per row. "Step overhead" is
// what the schema costs a decode step end to end: mask, accept, and the full-logits path (a masked
// batch cannot use forward_greedy, so B rows of logits come back and are drawn on the host).
//
//   build/minfer-synth qwen2.5-0.5b Q8_0 /tmp/q05-q8.gguf --vocab ../shared/models/qwen-vocab.gguf
//   build/bench_structured /tmp/q05-q8.gguf -t 2 -b 1,8,32 -p 128 -n 128
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "models/model.h"
#include "runtime/constraint.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using namespace minfer;
using Clock = std::chrono::steady_clock;

// Long enough that no value ends within a few hundred tokens (200 items at least), with every string
// bounded so that a random-valued model, which closes a free string rarely, keeps moving through the
// fields: integers, numbers, an enum, bounded and pattern strings, a nested array.
constexpr const char* kDefaultSchema = R"({
  "type": "array",
  "minItems": 200,
  "maxItems": 400,
  "items": {
    "type": "object",
    "properties": {
      "id": {"type": "integer", "minimum": 0, "maximum": 1000000},
      "name": {"type": "string", "maxLength": 24},
      "score": {"type": "number"},
      "status": {"enum": ["active", "inactive", "pending", "banned"]},
      "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 20},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
      "note": {"type": "string", "maxLength": 40}
    },
    "required": ["id", "name", "score", "status", "slug", "tags", "note"],
    "additionalProperties": false
  }
})";

struct Options {
    std::string model;
    std::vector<int> batches{1, 8, 32};
    int threads = 0, reps = 1, mask_reps = 5;
    int64_t n_prompt = 128, n_predict = 128;
    std::string device = "cpu";
    float temp = 0.0f;  // <= 0: greedy
    uint64_t seed = 1;
    std::string schema_file;
    bool show = false, no_pattern = false;
};

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct RunTimes {
    double prefill = 0, decode = 0;  // seconds: the first step, then the rest
    int64_t decode_steps = 0;
    std::vector<GenerationResult> results;  // by submission order
};

// One pass: B requests submitted together, the first step (every prefill and first token), then steps
// until idle.
RunTimes run_once(Engine& e, const Tokenizer& tok, const std::vector<std::vector<int32_t>>& prompts,
                  const Options& o, int64_t n_predict, const GrammarSpec& spec, uint64_t seed_base) {
    Scheduler s(e, tok);
    RunTimes t;
    t.results.resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        GenerationRequest r;
        r.prompt = prompts[i];
        r.gen.n_predict = n_predict;
        r.gen.ignore_eos = true;
        r.gen.sampling.temp = o.temp;
        r.gen.sampling.seed = seed_base + i;
        r.on_done = [&t, i](const GenerationResult& res) { t.results[i] = res; };
        r.grammar = spec;
        s.submit(std::move(r));
    }
    auto t0 = Clock::now();
    s.step();
    t.prefill = seconds_since(t0);
    t0 = Clock::now();
    while (s.step()) ++t.decode_steps;
    t.decode = seconds_since(t0);
    return t;
}

// The scheduler's vocabulary for grammars (Scheduler::grammar_vocab builds the same).
std::shared_ptr<const grammar::Vocab> grammar_vocab(const Tokenizer& tok) {
    std::vector<std::string> bytes(size_t(tok.n_vocab()));
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (!tok.is_special(id)) bytes[size_t(id)] = tok.token_to_bytes(id);
        if (tok.is_eog(id)) eog.push_back(id);
    }
    return std::make_shared<const grammar::Vocab>(std::move(bytes), std::move(eog));
}

template <class F>
double median_us(int reps, F&& f) {
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        f();
        us.push_back(seconds_since(t0) * 1e6);
    }
    std::nth_element(us.begin(), us.begin() + std::ptrdiff_t(us.size() / 2), us.end());
    return us[us.size() / 2];
}

struct MaskCost {
    // Per row (one sequence's mask at one step), means: Constraint::mask, the Matcher's fill_mask in the
    // same state, Constraint::accept, allowed tokens.
    double mask_us = 0, fill_us = 0, accept_us = 0, allowed = 0;
    double p99_us = 0, max_us = 0;  // of mask per row
    // Per decode step: the B rows' masks on the host threads (for_each_dynamic: each row in order to the
    // first free thread), and the B accepts one after another.
    double step_mask_ms = 0, step_mask_max_ms = 0, step_accept_ms = 0;
    int64_t rows = 0, rejected = 0;  // rejected: replayed tokens the mask did not allow (should be 0)
    std::string worst;               // the text before the slowest mask's state (its last 80 bytes)
    size_t worst_allowed = 0;
};

// The wall time of rows handed out in order to whichever of `threads` is free first.
double dynamic_makespan(const std::vector<double>& rows, int threads) {
    std::vector<double> free_at(size_t(std::max(1, std::min<int>(threads, int(rows.size())))), 0.0);
    for (const double t : rows) *std::min_element(free_at.begin(), free_at.end()) += t;
    return free_at.empty() ? 0.0 : *std::max_element(free_at.begin(), free_at.end());
}

// Every row of every sequence of a schema run, replayed state by state.
MaskCost replay(const std::vector<GenerationResult>& results, const GrammarSpec& spec,
                const std::shared_ptr<const grammar::Vocab>& vocab, const Tokenizer& tok, int64_t n_vocab,
                int reps, int threads) {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    for (float& v : logits) v = dist(rng);
    MaskCost c;
    std::vector<uint64_t> bits;
    std::vector<std::vector<double>> mask_at(results.size()), accept_at(results.size());  // [seq][step] us
    for (size_t r = 0; r < results.size(); ++r) {
        Constraint con(spec, vocab);
        grammar::Matcher m(spec.grammar, vocab);
        std::string text;
        for (const int32_t id : results[r].ids) {
            c.fill_us += median_us(reps, [&] { m.fill_mask(bits); });
            const double mask = median_us(reps, [&] { (void)con.mask(logits); });
            mask_at[r].push_back(mask);
            size_t allowed = 0;
            for (const uint64_t w : bits) allowed += size_t(__builtin_popcountll(w));
            c.allowed += double(allowed);
            if (mask > c.max_us) {
                c.max_us = mask;
                c.worst = text.substr(text.size() > 80 ? text.size() - 80 : 0);
                c.worst_allowed = allowed;
            }
            if (id < 0 || size_t(id) / 64 >= bits.size() || !((bits[size_t(id) / 64] >> (id % 64)) & 1))
                ++c.rejected;
            const std::string bytes = tok.is_special(id) ? std::string() : tok.token_to_bytes(id);
            const auto t0 = Clock::now();
            con.accept(id, bytes);
            accept_at[r].push_back(seconds_since(t0) * 1e6);
            text += bytes;
            m.accept(id);
            ++c.rows;
        }
    }
    std::vector<double> all;
    for (const auto& v : mask_at) all.insert(all.end(), v.begin(), v.end());
    if (all.empty()) return c;
    for (const double t : all) c.mask_us += t / double(all.size());
    const auto p99 = all.begin() + std::ptrdiff_t(all.size() * 99 / 100);
    std::nth_element(all.begin(), p99, all.end());
    c.p99_us = *p99;
    const double n = double(c.rows);
    c.fill_us /= n, c.allowed /= n;
    for (const auto& v : accept_at)
        for (const double t : v) c.accept_us += t / n;
    // Decode steps: token 1 on (token 0 is sampled in the prefill step).
    int64_t steps = 0;
    for (size_t k = 1;; ++k) {
        std::vector<double> rows;
        double accepts = 0;
        for (size_t r = 0; r < results.size(); ++r)
            if (k < mask_at[r].size()) rows.push_back(mask_at[r][k]), accepts += accept_at[r][k];
        if (rows.empty()) break;
        const double wall = dynamic_makespan(rows, threads) / 1e3;
        c.step_mask_ms += wall;
        c.step_mask_max_ms = std::max(c.step_mask_max_ms, wall);
        c.step_accept_ms += accepts / 1e3;
        ++steps;
    }
    c.step_mask_ms /= double(std::max<int64_t>(steps, 1));
    c.step_accept_ms /= double(std::max<int64_t>(steps, 1));
    return c;
}

struct Row {
    int b = 0, host_threads = 1;
    double plain_step = 0, schema_step = 0;  // seconds per decode step (mean over the repetitions)
    double plain_stg = 0, schema_stg = 0;
    MaskCost mask;
    int64_t short_runs = 0;  // sequences that did not generate N tokens (a value that ended early)
};

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw Error("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

Row bench_at(const Model& model, const Tokenizer& tok, const Options& o, int b, const GrammarSpec& spec,
             const std::shared_ptr<const grammar::Vocab>& vocab) {
    const int64_t block = kDefaultKvBlock;
    const int64_t per_seq = (o.n_prompt + o.n_predict + block) / block * block;
    EngineParams p;
    p.n_ctx = b * per_seq;
    p.n_threads = o.threads;
    p.device = o.device == "cuda" ? BackendKind::Cuda : BackendKind::Cpu;
    p.n_ubatch = std::max<int64_t>(kDefaultUbatch, b * o.n_prompt);  // every prompt in the first step
    p.max_seqs = b;
    p.prefix_cache = false;  // repeated runs prefill in full
    Engine e(model, p);

    std::mt19937 rng(1234 + uint32_t(b));
    std::uniform_int_distribution<int32_t> id(
        0, int32_t(std::min<int64_t>(tok.n_vocab(), model.hp.n_vocab) - 1));
    std::vector<std::vector<int32_t>> prompts(size_t(b), std::vector<int32_t>(size_t(o.n_prompt)));
    for (auto& pr : prompts)
        for (int32_t& t : pr) t = id(rng);

    const GrammarSpec none{};
    run_once(e, tok, prompts, o, 2, none, o.seed);  // warm-up: graphs, weights paged in
    run_once(e, tok, prompts, o, 2, spec, o.seed);  // and the masked path's full-logits graphs
    Row row;
    row.b = b;
    row.host_threads = e.host_threads().size();
    RunTimes last;
    for (int r = 0; r < o.reps; ++r) {
        const RunTimes plain = run_once(e, tok, prompts, o, o.n_predict, none, o.seed);
        RunTimes schema = run_once(e, tok, prompts, o, o.n_predict, spec, o.seed);
        if (plain.decode_steps != o.n_predict - 1)
            std::fprintf(stderr, "warning: B = %d ran %lld decode steps, not %lld\n", b,
                         static_cast<long long>(plain.decode_steps), static_cast<long long>(o.n_predict - 1));
        row.plain_step += plain.decode / double(std::max<int64_t>(plain.decode_steps, 1)) / o.reps;
        row.schema_step += schema.decode / double(std::max<int64_t>(schema.decode_steps, 1)) / o.reps;
        // Tokens of the decode steps: all but each sequence's first (sampled in the prefill step).
        int64_t plain_tokens = 0, schema_tokens = 0;
        for (const auto& res : plain.results)
            plain_tokens += std::max<int64_t>(0, int64_t(res.ids.size()) - 1);
        for (const auto& res : schema.results)
            schema_tokens += std::max<int64_t>(0, int64_t(res.ids.size()) - 1);
        row.plain_stg += double(plain_tokens) / plain.decode / o.reps;
        row.schema_stg += double(schema_tokens) / schema.decode / o.reps;
        last = std::move(schema);
    }
    for (const auto& res : last.results)
        if (int64_t(res.ids.size()) != o.n_predict) ++row.short_runs;
    if (o.show && !last.results.empty())
        std::fprintf(stderr, "B = %d, the first sequence's text with the schema:\n%s\n", b,
                     last.results[0].text.c_str());
    row.mask = replay(last.results, spec, vocab, tok, model.hp.n_vocab, o.mask_reps, row.host_threads);
    return row;
}

void print_rows(const std::vector<Row>& rows, const Options& o, const std::string& name) {
    std::printf("\nmodel: %s, device: %s, host threads: %d, P = %lld, N = %lld, %s, reps: %d\n\n",
                name.c_str(), o.device.c_str(), rows.empty() ? 0 : rows[0].host_threads,
                static_cast<long long>(o.n_prompt), static_cast<long long>(o.n_predict),
                o.temp > 0 ? "seeded sampling" : "greedy", o.reps);
    std::printf(
        "| B | S_TG no schema t/s | S_TG schema t/s | step no schema ms | step schema ms | step overhead | "
        "mask ms/step (max) | accept ms/step | mask share of step |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Row& r : rows) {
        const MaskCost& m = r.mask;
        std::printf("| %d | %.1f | %.1f | %.2f | %.2f | %+.1f%% | %.3f (%.2f) | %.3f | %.2f%% |\n", r.b,
                    r.plain_stg, r.schema_stg, r.plain_step * 1e3, r.schema_step * 1e3,
                    100.0 * (r.schema_step - r.plain_step) / r.plain_step, m.step_mask_ms, m.step_mask_max_ms,
                    m.step_accept_ms, 100.0 * m.step_mask_ms / (r.plain_step * 1e3));
    }
    std::printf(
        "\nPer row (one sequence's mask at one step), replayed on one thread:\n\n"
        "| B | rows | mask us (p99, max) | fill_mask us | copy us (mask - fill_mask) | "
        "allowed tokens | accept us |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Row& r : rows) {
        const MaskCost& m = r.mask;
        std::printf("| %d | %lld | %.0f (%.0f, %.0f) | %.0f | %.0f | %.0f | %.2f |\n", r.b,
                    static_cast<long long>(m.rows), m.mask_us, m.p99_us, m.max_us, m.fill_us,
                    m.mask_us - m.fill_us, m.allowed, m.accept_us);
    }
    std::printf("\nThe slowest mask's state per B (the text before it, JSON-escaped; allowed tokens):\n\n");
    for (const Row& r : rows)
        std::printf("- B = %d: %.0f us, %zu allowed, after %s\n", r.b, r.mask.max_us, r.mask.worst_allowed,
                    nlohmann::json(r.mask.worst)
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                        .c_str());
    for (const Row& r : rows) {
        if (r.short_runs > 0)
            std::printf("\nwarning: B = %d: %lld sequences ended their value before N tokens\n", r.b,
                        static_cast<long long>(r.short_runs));
        if (r.mask.rejected > 0)
            std::printf("\nwarning: B = %d: %lld replayed tokens were outside the mask\n", r.b,
                        static_cast<long long>(r.mask.rejected));
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{
        "Structured output in batched decode: S_TG with and without a JSON schema, and the mask's share"};
    app.add_option("model", o.model, "GGUF model with a tokenizer (e.g. minfer-synth ... --vocab)")
        ->required();
    app.add_option("-b,--batch", o.batches, "Sequence counts B, comma-separated")->delimiter(',');
    app.add_option("-t,--threads", o.threads, "Threads (0: all cores)");
    app.add_option("-p,--n-prompt", o.n_prompt, "Prompt tokens per sequence (random ids)");
    app.add_option("-n,--n-predict", o.n_predict, "Tokens generated per sequence");
    app.add_option("-r,--repetitions", o.reps, "Timed runs of each mode per B (means)");
    app.add_option("--mask-reps", o.mask_reps, "Calls timed per replayed state (median)");
    app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--temp", o.temp, "Sampling temperature (<= 0: greedy)");
    app.add_option("--seed", o.seed, "First request's seed (request i: seed + i)");
    app.add_option("--schema", o.schema_file, "JSON schema file (default: an array of 200-400 objects)");
    app.add_flag("--no-pattern", o.no_pattern, "Drop the default schema's pattern string (slug)");
    app.add_flag("--show", o.show, "Print each B's first schema-constrained text on stderr");
    CLI11_PARSE(app, argc, argv);
    try {
        if (o.n_predict < 2 || o.n_prompt < 1 || o.reps < 1 || o.mask_reps < 1)
            throw Error("-n must be at least 2, -p, -r and --mask-reps at least 1");
        if (o.threads <= 0) o.threads = int(std::max(1u, std::thread::hardware_concurrency()));
        const bool cuda = o.device == "cuda";
        auto model =
            Model::from_file(GgufFile::open(o.model, cuda ? Residency::mapped : Residency::huge_pages));
        if (cuda) model->file->prefetch();
        const auto tok = Tokenizer::from_gguf(*model->file);
        auto schema = nlohmann::ordered_json::parse(o.schema_file.empty() ? std::string(kDefaultSchema)
                                                                          : read_file(o.schema_file));
        if (o.no_pattern) {
            auto& item = schema["items"];
            item["properties"].erase("slug");
            auto& req = item["required"];
            req.erase(std::remove(req.begin(), req.end(), "slug"), req.end());
        }
        const GrammarSpec spec{grammar::compile_json_schema(schema), ""};
        const auto vocab = grammar_vocab(*tok);
        std::vector<Row> rows;
        for (const int b : o.batches) {
            rows.push_back(bench_at(*model, *tok, o, b, spec, vocab));
            std::fprintf(stderr, "B = %d done\n", b);
        }
        print_rows(rows, o, std::filesystem::path(o.model).filename().string());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
