// minfer info: what a GGUF model is (architecture, hyper-parameters, tokenizer, tensor types, size),
// as readable lines or, with --json, one JSON object.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "common.h"
#include "gguf/gguf.h"
#include "models/model.h"
#include "util/error.h"

namespace minfer {

namespace {

using nlohmann::json;

struct InfoOptions {
    std::string model;
    bool json = false;
};

json hparams_json(const Hparams& hp) {
    json j = {{"layers", hp.n_layer},     {"n_embd", hp.n_embd},       {"heads", hp.n_head},
              {"kv_heads", hp.n_head_kv}, {"head_dim", hp.head_dim},   {"n_ff", hp.n_ff},
              {"vocab", hp.n_vocab},      {"context", hp.n_ctx_train}, {"rope_base", hp.rope_base},
              {"rms_eps", hp.rms_eps}};
    if (hp.n_expert > 0)
        j["experts"] = {{"count", hp.n_expert},
                        {"used", hp.n_expert_used},
                        {"n_ff", hp.n_ff_exp},
                        {"gating", expert_gating_name(hp.expert_gating)},
                        {"norm", hp.expert_norm}};
    if (hp.n_swa > 0) j["sliding_window"] = hp.n_swa;
    if (hp.rope_freq_scale != 1.0f) j["rope_scale"] = hp.rope_freq_scale;
    return j;
}

json tokenizer_json(const GgufFile& f) {
    const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
    const auto* arr = tokens ? std::get_if<std::shared_ptr<GgufArray>>(&tokens->v) : nullptr;
    const std::string tmpl = f.get_str_or("tokenizer.chat_template", "");
    return {{"model", f.get_str_or("tokenizer.ggml.model", "")},
            {"pre", f.get_str_or("tokenizer.ggml.pre", "")},
            {"vocab_size", arr && *arr ? (*arr)->items.size() : 0},
            {"chat_template", !tmpl.empty()},
            {"chat_template_length", tmpl.size()}};
}

// Tensor types by count, most common first: [["Q8_0", 37], ["F32", 25]].
std::vector<std::pair<std::string, int>> type_histogram(const GgufFile& f) {
    std::map<std::string, int> counts;
    for (const GgufTensor& t : f.tensors()) ++counts[ggml_type_name(t.type)];
    std::vector<std::pair<std::string, int>> h(counts.begin(), counts.end());
    std::stable_sort(h.begin(), h.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return h;
}

// A metadata value as gguf-dump shows it: scalars as they are, long strings by length, arrays by
// element type and count.
json metadata_value(const GgufValue& v) {
    constexpr size_t kLongString = 200;
    if (const auto* arr = std::get_if<std::shared_ptr<GgufArray>>(&v.v)) {
        const size_t n = *arr ? (*arr)->items.size() : 0;
        const std::string elem = *arr ? gguf_value_type_name((*arr)->elem_type) : "?";
        return "[" + elem + " x " + std::to_string(n) + "]";
    }
    if (const auto* str = std::get_if<std::string>(&v.v))
        return str->size() > kLongString ? json("<" + std::to_string(str->size()) + " chars>") : json(*str);
    return std::visit(
        [](const auto& x) -> json {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>> || std::is_same_v<T, std::string>)
                return nullptr;
            else
                return x;
        },
        v.v);
}

json metadata_json(const GgufFile& f) {
    json j = json::object();
    for (const auto& [key, v] : f.metadata()) j[key] = metadata_value(v);
    return j;
}

// `m` is null when minfer cannot run the file; `why` then says what is missing.
json info_json(const std::string& path, const GgufFile& f, const Model* m, const std::string& why) {
    int64_t n_params = 0;
    for (const GgufTensor& t : f.tensors()) n_params += t.n_elements();
    json types = json::object();
    for (const auto& [name, n] : type_histogram(f)) types[name] = n;
    json j = {{"path", path},
              {"architecture", f.get_str_or("general.architecture", "")},
              {"name", f.get_str_or("general.name", "")},
              {"gguf_version", f.version()},
              {"metadata", metadata_json(f)},
              {"tokenizer", tokenizer_json(f)},
              {"tensor_count", f.tensors().size()},
              {"tensor_types", types},
              {"parameters", n_params},
              {"file_size_bytes", f.file_size()},
              {"file_size_mb", double(f.file_size()) / 1e6},
              {"runnable", m != nullptr}};
    if (m)
        j["hparams"] = hparams_json(m->hp);
    else
        j["not_runnable_because"] = why;
    return j;
}

void print_hparams(const json& hp) {
    for (const char* k : {"layers", "n_embd", "heads", "kv_heads", "head_dim", "n_ff", "vocab", "context"})
        std::printf("%-14s %lld\n", (std::string(k) + ":").c_str(), hp[k].get<long long>());
    std::printf("rope_base:     %g\n", hp["rope_base"].get<double>());
    std::printf("rms_eps:       %g\n", hp["rms_eps"].get<double>());
    if (const auto e = hp.find("experts"); e != hp.end())
        std::printf("experts:       %lld, %lld used per token, n_ff %lld, %s%s\n",
                    (*e)["count"].get<long long>(), (*e)["used"].get<long long>(),
                    (*e)["n_ff"].get<long long>(), (*e)["gating"].get<std::string>().c_str(),
                    (*e)["norm"].get<bool>() ? ", renormalised" : "");
}

// Without hyper-parameters minfer understands, every metadata key but the tokenizer's, as gguf-dump.
void print_metadata(const json& md) {
    std::printf("metadata:\n");
    for (const auto& [key, v] : md.items())
        if (key.rfind("tokenizer.", 0) != 0)
            std::printf("  %-40s %s\n", key.c_str(),
                        v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
}

void print_human(const json& j, const GgufFile& f) {
    const json& tk = j["tokenizer"];
    std::printf("file:          %s\n", j["path"].get<std::string>().c_str());
    std::printf("architecture:  %s\n", j["architecture"].get<std::string>().c_str());
    std::printf("name:          %s\n", j["name"].get<std::string>().c_str());
    if (j["runnable"].get<bool>())
        print_hparams(j["hparams"]);
    else
        print_metadata(j["metadata"]);
    std::printf("tokenizer:     %s (pre: %s), %zu tokens\n", tk["model"].get<std::string>().c_str(),
                tk["pre"].get<std::string>().c_str(), tk["vocab_size"].get<size_t>());
    std::printf("chat template: %s (%zu chars)\n", tk["chat_template"].get<bool>() ? "yes" : "no",
                tk["chat_template_length"].get<size_t>());
    std::string types;
    for (const auto& [name, n] : type_histogram(f))
        types += (types.empty() ? "" : ", ") + name + ": " + std::to_string(n);
    std::printf("tensors:       %zu (%s)\n", j["tensor_count"].get<size_t>(), types.c_str());
    std::printf("parameters:    %lld (%.2f M)\n", j["parameters"].get<long long>(),
                j["parameters"].get<double>() / 1e6);
    std::printf("file size:     %.2f MB\n", j["file_size_mb"].get<double>());
    if (j["runnable"].get<bool>())
        std::printf("runnable:      yes\n");
    else
        std::printf("runnable:      no: %s\n", j["not_runnable_because"].get<std::string>().c_str());
}

// Describes any GGUF the reader accepts; a file minfer cannot run (a vocabulary-only file, an
// unknown architecture, ...) is still described, with what is missing for running.
void info(const InfoOptions& o) {
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    std::unique_ptr<Model> model;
    std::unique_ptr<GgufFile> file;
    std::string why;
    file = GgufFile::open(path);
    try {
        model = Model::from_file(std::move(file));
    } catch (const Error& e) {
        why = e.what();
        if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
        file = GgufFile::open(path);
        if (file->tensors().empty()) why = "no tensors, a vocabulary-only file (" + why + ")";
    }
    const GgufFile& f = model ? *model->file : *file;
    const json j = info_json(path, f, model.get(), why);
    if (o.json)
        std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    else
        print_human(j, f);
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto o = std::make_shared<InfoOptions>();
    CLI::App* c = app.add_subcommand("info", "Describe a GGUF model: hyper-parameters, tokenizer, tensors");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_flag("--json", o->json, "Print one JSON object");
    c->callback([o] { info(*o); });
}

}  // namespace minfer
