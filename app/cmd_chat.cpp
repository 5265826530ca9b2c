// minfer chat: a conversation read line by line from stdin, answers streamed to stdout. Every turn renders
// the whole conversation with the model's chat template and forwards only the tokens past the longest
// prefix the KV cache already holds (the cache is rebuilt from scratch when the rendering diverges).
// When the conversation outgrows the context, its oldest messages (not the system message) are dropped
// until it fills at most three quarters of it, and chat says so. Commands (/help lists them): /reset
// clears the conversation, /exit, /quit, /bye (or end of input) quit. Ctrl-C stops the answer being
// generated; at the prompt it quits.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "chat_prompt.h"
#include "common.h"
#include "gguf/gguf.h"
#include "graph/graph.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
    g_interrupted = 1;
}

struct ChatOptions {
    std::string model;
    std::optional<std::string> system;
    std::string system_file;
    int64_t n_ctx = 0, n_predict = 512, n_ubatch = kDefaultUbatch;
    int threads = 0;
    BackendKind device = BackendKind::Cpu;
    GgmlType kv_type = GgmlType::F32;
    SamplerParams sampling;
};

class Chat {
  public:
    Chat(const ChatOptions& o, Session& s, const Tokenizer& tok, const ChatPrompt& prompt)
        : o_(o), s_(s), tok_(tok), prompt_(prompt), sampler_(o.sampling) {
        gen_.n_predict = o.n_predict;
        gen_.should_stop = [] { return g_interrupted != 0; };
        reset();
    }

    void reset();
    // Adds the user message, streams the answer to stdout (ended by a newline) and adds it to the
    // conversation.
    void turn(const std::string& user);

  private:
    // Tokens of the rendered conversation `ids` that the KV cache does not hold yet (never empty: the
    // last prompt token must be forwarded for its logits); resets the cache when it diverged.
    std::span<const int32_t> new_tokens(const std::vector<int32_t>& ids);
    // The rendered conversation with the new user message, the oldest messages dropped when it does
    // not fit the context; empty (and the user message removed) when that message alone does not fit.
    std::vector<int32_t> render_to_fit();

    const ChatOptions& o_;
    Session& s_;
    const Tokenizer& tok_;
    const ChatPrompt& prompt_;
    Sampler sampler_;
    GenerateParams gen_;
    nlohmann::ordered_json messages_;
    std::vector<int32_t> cached_;  // the tokens in the KV cache, positions 0 .. n_past - 1
};

void Chat::reset() {
    messages_ = nlohmann::ordered_json::array();
    if (o_.system) messages_.push_back(chat_message("system", *o_.system));
    s_.reset();
    cached_.clear();
    sampler_.reset();
}

std::span<const int32_t> Chat::new_tokens(const std::vector<int32_t>& ids) {
    const auto diverge = std::mismatch(cached_.begin(), cached_.end(), ids.begin(), ids.end());
    const auto reused = size_t(diverge.first - cached_.begin());
    // The cache cannot be cut back, and the last prompt token must be forwarded to get its logits.
    if (reused < cached_.size() || reused == ids.size()) {
        s_.reset();
        cached_.clear();
        return ids;
    }
    return std::span<const int32_t>(ids).subspan(reused);
}

std::vector<int32_t> Chat::render_to_fit() {
    std::vector<int32_t> ids = prompt_.encode(messages_, true);
    if (int64_t(ids.size()) < s_.n_ctx()) return ids;
    const size_t first = o_.system ? 1 : 0;  // the oldest message that may go
    size_t dropped = 0;
    while (messages_.size() > first + 1 && int64_t(ids.size()) > s_.n_ctx() * 3 / 4) {
        messages_.erase(first);
        ++dropped;
        ids = prompt_.encode(messages_, true);
    }
    if (int64_t(ids.size()) >= s_.n_ctx()) {
        messages_.erase(messages_.size() - 1);
        std::fprintf(stderr,
                     "this message needs %zu tokens, more than the context of %lld: shorten it, or -c\n",
                     ids.size(), static_cast<long long>(s_.n_ctx()));
        return {};
    }
    std::fprintf(stderr, "the context of %lld tokens was full: dropped the oldest %zu messages\n",
                 static_cast<long long>(s_.n_ctx()), dropped);
    return ids;
}

void Chat::turn(const std::string& user) {
    messages_.push_back(chat_message("user", user));
    const std::vector<int32_t> ids = render_to_fit();
    if (ids.empty()) return;
    const std::span<const int32_t> suffix = new_tokens(ids);
    const size_t reused = ids.size() - suffix.size();
    const GenerateResult r = generate(s_, tok_, suffix, gen_, sampler_,
                                      [](std::string_view piece) { std::cout << piece << std::flush; });
    std::cout << "\n" << std::flush;
    if (r.hit_context_limit)
        std::fprintf(stderr, "stopped: the context is full (the next turn drops the oldest messages)\n");
    // The cache now holds the new prompt tokens and every generated token but a last one never fed back.
    cached_.insert(cached_.end(), suffix.begin(), suffix.end());
    cached_.insert(cached_.end(), r.ids.begin(), r.ids.end());
    cached_.resize(size_t(s_.n_past()));
    messages_.push_back(chat_message("assistant", r.text));
    std::fprintf(stderr, "[prompt %zu tokens (%zu reused), %.2f s | answer %zu tokens, %.1f tok/s]\n",
                 ids.size(), reused, r.prefill_s, r.ids.size(),
                 double(r.ids.size()) / std::max(r.decode_s, 1e-9));
}

enum class Command { None, Quit, Reset, Help, Unknown };

// A line of one slash and lowercase letters is a command; anything else goes to the model.
Command command_of(const std::string& line) {
    if (line.size() < 2 || line[0] != '/' ||
        !std::all_of(line.begin() + 1, line.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
        return Command::None;
    if (line == "/exit" || line == "/quit" || line == "/bye") return Command::Quit;
    if (line == "/reset") return Command::Reset;
    return line == "/help" ? Command::Help : Command::Unknown;
}

constexpr const char* kHelp =
    "commands: /reset clears the conversation; /exit, /quit or /bye (or end of input) quit; /help shows "
    "this. Ctrl-C stops an answer.\n";

void chat(ChatOptions o) {
    if (!o.system_file.empty()) {
        if (o.system) throw Error("give --system TEXT or -f FILE, not both");
        o.system = read_text_file(o.system_file, "system message");
    }
    const auto model = load_model(o.model, o.device);
    warn_beyond_training(*model, o.n_ctx);
    const auto tok = Tokenizer::from_gguf(*model->file);
    const ChatPrompt prompt(*model->file, *tok);
    Session session(*model, {o.n_ctx, o.threads, o.device, o.n_ubatch, false, o.kv_type});
    Chat c(o, session, *tok, prompt);
    std::fprintf(stderr, "seed: %llu\n", static_cast<unsigned long long>(o.sampling.seed));
    std::fprintf(stderr, "minfer chat: %s, context of %lld tokens; /help lists the commands\n",
                 model->file->path().c_str(), static_cast<long long>(session.n_ctx()));

    // No SA_RESTART: Ctrl-C at the prompt interrupts the read, which ends the loop.
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    const bool tty = isatty(STDIN_FILENO);
    for (std::string line;;) {
        if (tty) std::cerr << "> " << std::flush;
        if (!std::getline(std::cin, line)) break;
        const Command cmd = command_of(line);
        if (cmd == Command::Quit) break;
        if (cmd == Command::Reset) {
            c.reset();
            std::fprintf(stderr, "conversation cleared\n");
        } else if (cmd == Command::Help) {
            std::fputs(kHelp, stderr);
        } else if (cmd == Command::Unknown) {
            std::fprintf(stderr, "unknown command %s; /help lists the commands\n", line.c_str());
        } else if (!line.empty()) {
            g_interrupted = 0;
            c.turn(line);
        }
    }
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto o = std::make_shared<ChatOptions>();
    CLI::App* c =
        app.add_subcommand("chat", "Chat with the model: user lines on stdin (/help, /reset, /exit)");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("--system", o->system, "System message (also -sys)");
    c->add_option("-f,--file", o->system_file, "System message from a file (as llama-cli -cnv -f)");
    c->add_option("-n,--n-predict", o->n_predict, "Most tokens per answer (-1: until the end)")
        ->type_name("INT")
        ->capture_default_str()
        ->transform(n_predict_check());
    c->add_option("-c,--ctx-size", o->n_ctx, "Context size in tokens (default: model's, at most 4096)")
        ->check(int_in(0, 1 << 24));
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    add_kv_type_option(*c, o->kv_type);
    add_sampling_options(*c, o->sampling);
    c->callback([o] { chat(*o); });
}

}  // namespace minfer
