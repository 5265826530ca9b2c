// minfer run: generate text from a prompt (streamed), or with --json one object for scripts.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "chat_prompt.h"
#include "common.h"
#include "gguf/gguf.h"
#include "graph/graph.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer {

namespace {

struct RunOptions {
    std::string model, prompt_ids, file;
    std::optional<std::string> prompt;  // -p: may be empty (the BOS alone, where the vocabulary adds one)
    int64_t n_ctx = 0, n_ubatch = kDefaultUbatch, kv_mem = 0;
    int threads = 0, parallel = 0, tensor_parallel = 1;
    bool deterministic = false;
    BackendKind device = BackendKind::Cpu;
    GgmlType kv_type = GgmlType::F32;
    std::optional<std::string> system;
    bool json = false, chat = false;
    GenerateParams gen;
    GraphDumpOptions dump;
};

void print_summary(const std::string& model, double load_s, size_t n_prompt, const GenerateResult& r) {
    std::fprintf(
        stderr,
        "\nmodel: %s | load %.2f s | prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s\n",
        model.c_str(), load_s, n_prompt, double(n_prompt) / std::max(r.prefill_s, 1e-9), r.ids.size(),
        r.ids.size() > 1 ? double(r.ids.size() - 1) / std::max(r.decode_s, 1e-9) : 0.0);
    if (r.hit_context_limit) std::fprintf(stderr, "stopped: the context is full (use -c to raise it)\n");
}

// -p as given (BOS added when the vocabulary asks), or with --chat / -sys through the chat template.
std::vector<int32_t> encode_prompt(const RunOptions& o, const std::string& text, const GgufFile& f,
                                   const Tokenizer& tok) {
    if (!o.chat && !o.system) return tok.encode(text, true, true);
    auto messages = nlohmann::ordered_json::array();
    if (o.system) messages.push_back(chat_message("system", *o.system));
    messages.push_back(chat_message("user", text));
    return ChatPrompt(f, tok).encode(messages, true);
}

// generate(), with the prompt's passes but the last run here first, so that a long prompt shows its
// progress on a terminal. The sampler sees the prompt in the same order, so the tokens do not change.
GenerateResult generate_prompt(Session& s, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                               const GenerateParams& gp,
                               const std::function<void(std::string_view)>& on_text) {
    const auto n = int64_t(prompt.size()), pass = s.engine().max_tokens();
    const int64_t head = n > pass && n <= s.n_ctx() ? (n - 1) / pass * pass : 0;
    Sampler sampler(gp.sampling);
    for (int64_t i = 0; i < head; ++i) sampler.accept(prompt[size_t(i)]);
    const auto t0 = std::chrono::steady_clock::now();
    forward_in_passes(s, std::span(prompt).first(size_t(head)), "prompt", progress_wanted(), n);
    const double head_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    GenerateResult r = generate(s, tok, std::span(prompt).subspan(size_t(head)), gp, sampler, on_text);
    r.prefill_s += head_s;
    return r;
}

SessionParams session_params(const RunOptions& o) {
    return {o.n_ctx,         o.threads, o.device, o.n_ubatch,
            o.deterministic, o.kv_type, o.kv_mem, o.tensor_parallel};
}

// The non-empty lines of the -f file.
std::vector<std::string> read_prompts(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot open the prompts file");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) out.push_back(line);
    if (out.empty()) throw Error(path + ": no prompts (one per line)");
    return out;
}

// Without -c or --kv-mem, a KV cache that holds the N sequences that run at once whole: N times the
// longest prompt plus -n tokens (never below the one-sequence default). A smaller shared cache makes
// them take blocks from each other, and the scheduler preempts and recomputes the youngest.
void size_parallel_kv(const RunOptions& o, const std::vector<std::vector<int32_t>>& prompts,
                      EngineParams& ep) {
    if (o.n_ctx > 0 || o.kv_mem > 0 || o.gen.n_predict < 0) return;
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    const int64_t seqs = std::min<int64_t>(o.parallel, int64_t(prompts.size()));
    const int64_t need = seqs * (int64_t(longest) + o.gen.n_predict);
    if (need <= ep.n_ctx) return;
    ep.n_ctx = need;
    std::fprintf(stderr, "kv cache: %lld tokens, for %lld sequences of up to %zu + %lld tokens at once\n",
                 static_cast<long long>(need), static_cast<long long>(seqs), longest,
                 static_cast<long long>(o.gen.n_predict));
}

// --parallel N -f FILE: every prompt through the continuous-batching scheduler, at most N at once, the
// answers printed in input order once all are done.
void run_parallel(const RunOptions& o) {
    if (o.file.empty()) throw Error("--parallel needs a prompts file: -f FILE (one prompt per line)");
    std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(o.gen.sampling.seed));
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const auto model = load_model(path, o.device);
    warn_beyond_training(*model, o.n_ctx);
    const auto tok = Tokenizer::from_gguf(*model->file);
    const std::vector<std::string> texts = read_prompts(o.file);
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& t : texts) prompts.push_back(encode_prompt(o, t, *model->file, *tok));
    EngineParams ep = engine_params(*model, session_params(o));
    ep.max_seqs = o.parallel;
    size_parallel_kv(o, prompts, ep);
    Engine engine(*model, ep);
    Scheduler sched(engine, *tok);
    std::vector<GenerationResult> results(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        sched.submit({prompts[i], o.gen, {}, [&results, i](const GenerationResult& r) { results[i] = r; }});
    }
    sched.run_until_idle();
    for (size_t i = 0; i < texts.size(); ++i) {
        if (o.json)
            std::cout << nlohmann::json{{"index", i},
                                        {"prompt_ids", prompts[i]},
                                        {"ids", results[i].ids},
                                        {"text", results[i].text}}
                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                      << "\n";
        else
            std::cout << "[" << i << "] " << texts[i] << results[i].text << "\n";
    }
}

void run(RunOptions o) {
    if (o.parallel > 0) return run_parallel(o);
    if (!o.file.empty()) {  // without --parallel the whole file is the prompt, as llama.cpp's -f
        if (o.prompt) throw Error("give -p TEXT or -f FILE, not both");
        o.prompt = read_text_file(o.file, "prompt");
        if (o.prompt->empty()) throw Error(o.file + ": the prompt file is empty");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const auto model = load_model(path, o.device);
    warn_beyond_training(*model, o.n_ctx);
    const auto tok = Tokenizer::from_gguf(*model->file);
    Session session(*model, session_params(o));
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    if (o.prompt.has_value() == !o.prompt_ids.empty())
        throw Error("give exactly one of -p TEXT or --prompt-ids IDS");
    const std::vector<int32_t> prompt =
        o.prompt ? encode_prompt(o, *o.prompt, *model->file, *tok) : parse_ids(o.prompt_ids, "--prompt-ids");
    if (prompt.empty()) throw Error("the prompt is empty and this model adds no BOS token: give some text");
    if (o.dump.requested()) return dump_graph(session, session.params_for(int64_t(prompt.size()), 1), o.dump);

    // The first pass's set-up (graph, KV memory) counts as loading, not in the prompt rate.
    const auto t1 = std::chrono::steady_clock::now();
    if (!prompt.empty() && int64_t(prompt.size()) <= session.n_ctx()) session.prepare(int64_t(prompt.size()));
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(o.gen.sampling.seed));
    auto stream = [&](std::string_view text) { std::cout << text << std::flush; };
    const GenerateResult r = generate_prompt(session, *tok, prompt, o.gen,
                                             o.json ? std::function<void(std::string_view)>() : stream);
    if (o.json) {
        std::cout << nlohmann::json{{"prompt_ids", prompt}, {"ids", r.ids}, {"text", r.text}}.dump(
                         -1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
    } else {
        std::cout << "\n";
        print_summary(path, load_s + setup_s, prompt.size(), r);
    }
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* c = app.add_subcommand("run", "Generate text from a prompt");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("-p,--prompt", o->prompt, "Prompt text");
    CLI::Option* ids = c->add_option("--prompt-ids", o->prompt_ids,
                                     "Prompt as comma-separated token ids (used as given, no BOS)");
    CLI::Option* chat =
        c->add_flag("--chat", o->chat, "Apply the model's chat template to -p as a user message");
    CLI::Option* sys = c->add_option("--system", o->system, "System message (also -sys; implies --chat)");
    c->add_flag("--no-template")
        ->description("Use -p as plain text (the default)")
        ->excludes(chat)
        ->excludes(sys);
    chat->excludes(ids);
    sys->excludes(ids);
    c->add_option("-n,--n-predict", o->gen.n_predict, "Tokens to generate (-1: until the end)")
        ->type_name("INT")
        ->capture_default_str()
        ->transform(n_predict_check());
    c->add_option("-c,--ctx-size", o->n_ctx, "Context size in tokens (default: model's, at most 4096)")
        ->check(int_in(0, 1 << 24));
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    add_kv_type_option(*c, o->kv_type);
    add_kv_mem_option(*c, o->kv_mem);
    add_tensor_parallel_option(*c, o->tensor_parallel);
    add_sampling_options(*c, o->gen.sampling);
    c->add_option("--stop", o->gen.stop, "Stop string (repeatable)");
    c->add_flag("--ignore-eos", o->gen.ignore_eos, "Do not stop at end of generation");
    c->add_flag("--special", o->gen.special, "Show control tokens (<|im_end|>, ...) in the text");
    c->add_flag("--json", o->json,
                "Print one JSON object {prompt_ids, ids, text} (per prompt with --parallel)");
    c->add_option("--parallel", o->parallel,
                  "Run the prompts of -f through the batching scheduler, N at once")
        ->check(int_in(1, 1024));
    c->add_option("-f,--file", o->file, "Prompt file (with --parallel: one prompt per line)");
    c->add_flag("--deterministic", o->deterministic,
                "Batch-invariant arithmetic: a prompt's tokens do not depend on what runs beside it");
    o->dump.add_to(*c);
    c->callback([o] { run(*o); });
}

}  // namespace minfer
