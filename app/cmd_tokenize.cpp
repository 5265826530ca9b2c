// minfer tokenize / detokenize / template: the tokenizer and chat template stage on its own.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "chat_prompt.h"
#include "common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer {

namespace {

struct TokenizeOptions {
    std::string model, prompt_file, ids, messages;
    std::optional<std::string> prompt;  // -p: may be empty
    bool no_special = false, json = false, ids_only = false, add_generation_prompt = false;
};

std::unique_ptr<GgufFile> open_model(const std::string& path) {
    return GgufFile::open(path.empty() ? default_model_path() : path);
}

// -p TEXT, or -f FILE (the whole file); either may be empty.
std::string text_of(const TokenizeOptions& o) {
    if (o.prompt_file.empty() == !o.prompt) throw Error("give exactly one of -p TEXT or -f FILE");
    if (o.prompt) return *o.prompt;
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) throw Error(o.prompt_file + ": cannot open");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void tokenize(const TokenizeOptions& o) {
    const std::string text = text_of(o);
    const auto file = open_model(o.model);
    const auto tok = Tokenizer::from_gguf(*file);
    const std::vector<int32_t> ids = tok->encode(text, true, !o.no_special);
    // An empty list prints as one, so that an empty text's answer is visible.
    if (o.ids_only || (!o.json && ids.empty())) {
        std::cout << nlohmann::json(ids).dump() << "\n";
        return;
    }
    if (!o.json) {
        for (int32_t id : ids) std::cout << id << " '" << tok->token_to_bytes(id) << "'\n";
        return;
    }
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok->token_to_bytes(id));
    std::cout << nlohmann::json{{"ids", ids}, {"pieces", pieces}}.dump(
                     -1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
}

void detokenize(const TokenizeOptions& o) {
    const auto file = open_model(o.model);
    const auto tok = Tokenizer::from_gguf(*file);
    const std::vector<int32_t> ids = parse_ids(o.ids, "--ids");
    for (int32_t id : ids)
        if (id < 0 || id >= tok->n_vocab())
            throw Error("--ids: token id " + std::to_string(id) + " is out of range [0, " +
                        std::to_string(tok->n_vocab()) + ")");
    std::cout << tok->decode(ids) << "\n";
}

// The template sees the variables chat and run --chat give it (bos_token, eos_token: ChatPrompt).
void render_template(const TokenizeOptions& o) {
    const auto file = open_model(o.model);
    const auto tok = Tokenizer::from_gguf(*file);
    const ChatPrompt prompt(*file, *tok);
    std::ifstream f(o.messages);
    if (!f) throw Error(o.messages + ": cannot open");
    const auto messages = nlohmann::ordered_json::parse(f, nullptr, false);
    if (messages.is_discarded() || !messages.is_array())
        throw Error(o.messages + ": expected a JSON array of messages");
    std::cout << prompt.render(messages, o.add_generation_prompt);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* t = app.add_subcommand("tokenize", "Text to token ids");
    t->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    t->add_option("-p,--prompt", o->prompt, "Text");
    t->add_option("-f,--file", o->prompt_file, "File whose whole text is tokenized");
    t->add_flag("--no-special", o->no_special, "Treat special-token text as plain text");
    CLI::Option* json = t->add_flag("--json", o->json, "Print {ids, pieces}");
    t->add_flag("--ids", o->ids_only, "Print the ids alone, as a JSON list (llama-tokenize's --ids)")
        ->excludes(json);
    t->callback([o] { tokenize(*o); });

    CLI::App* d = app.add_subcommand("detokenize", "Token ids to text");
    d->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    d->add_option("--ids", o->ids, "Comma-separated token ids")->required();
    d->callback([o] { detokenize(*o); });

    CLI::App* c = app.add_subcommand("template", "Render the model's chat template");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("--messages", o->messages, "JSON file: [{\"role\":…, \"content\":…}, …]")->required();
    c->add_flag("--add-generation-prompt", o->add_generation_prompt, "End with the assistant prompt");
    c->callback([o] { render_template(*o); });
}

}  // namespace minfer
