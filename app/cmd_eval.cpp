// minfer eval: teacher-forced forward over given ids; the top-k logits at every position as JSON,
// optionally all logits as float32 [position][vocab].
#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common.h"
#include "graph/graph.h"
#include "runtime/session.h"
#include "util/error.h"

namespace minfer {

namespace {

struct EvalOptions {
    std::string model, prompt_ids, all_logits;
    int top_k = 10;
    int64_t n_ctx = 0, n_ubatch = kDefaultUbatch;
    int threads = 0;
    BackendKind device = BackendKind::Cpu;
    GgmlType kv_type = GgmlType::F32;
    bool json = false;
    GraphDumpOptions dump;
};

nlohmann::json top_k_of(const float* row, int64_t n_vocab, int k) {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    k = int(std::min<int64_t>(k, n_vocab));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    nlohmann::json ids = nlohmann::json::array(), logits = nlohmann::json::array();
    for (int i = 0; i < k; ++i) ids.push_back(idx[size_t(i)]), logits.push_back(row[idx[size_t(i)]]);
    return {{"top_ids", ids}, {"top_logits", logits}};
}

void eval(const EvalOptions& o) {
    const auto model = load_model(o.model, o.device);
    const std::vector<int32_t> ids = parse_ids(o.prompt_ids, "--prompt-ids");
    Session session(*model, {o.n_ctx, o.threads, o.device, o.n_ubatch, false, o.kv_type});
    const auto nt = int64_t(ids.size());
    if (o.dump.requested()) return dump_graph(session, session.params_for(nt, nt), o.dump);
    std::ofstream f;
    if (!o.all_logits.empty()) {
        f.open(o.all_logits, std::ios::binary);
        if (!f) throw Error(o.all_logits + ": cannot open for writing");
    }
    const std::span<const float> logits = session.forward(ids, nt);
    const int64_t n_vocab = model->hp.n_vocab;
    if (f.is_open()) {
        f.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size_bytes()));
        if (!f) throw Error(o.all_logits + ": write failed");
    }
    nlohmann::json positions = nlohmann::json::array();
    for (int64_t t = 0; t < nt; ++t)
        positions.push_back(top_k_of(logits.data() + t * n_vocab, n_vocab, o.top_k));
    const nlohmann::json out{{"ids", ids}, {"positions", positions}};
    std::cout << (o.json ? out.dump() : out.dump(1)) << "\n";
}

}  // namespace

void add_eval_command(CLI::App& app) {
    auto o = std::make_shared<EvalOptions>();
    CLI::App* c = app.add_subcommand("eval", "Teacher-forced logits over given token ids");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("--prompt-ids", o->prompt_ids, "Token ids, comma-separated")->required();
    c->add_option("--top-k", o->top_k, "Logits reported per position")->check(int_in(1, 1 << 30));
    c->add_option("--all-logits", o->all_logits, "Write all logits as float32 [position][vocab] to FILE");
    c->add_option("-c,--ctx-size", o->n_ctx, "Context size")->check(int_in(0, 1 << 24));
    c->add_option("-t,--threads", o->threads, "Threads")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    add_kv_type_option(*c, o->kv_type);
    c->add_flag("--json", o->json, "Compact JSON");
    o->dump.add_to(*c);
    c->callback([o] { eval(*o); });
}

}  // namespace minfer
