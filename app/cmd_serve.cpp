// minfer serve: the OpenAI-compatible HTTP server (src/server/) on the batching engine. It binds and
// answers /health (503) while the model loads, prints "listening on http://HOST:PORT" on stdout once it
// serves, and on SIGINT or SIGTERM stops accepting, lets in-flight requests finish for a few seconds,
// cancels the rest and exits 0.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common.h"
#include "models/model.h"
#include "runtime/session.h"
#include "server/server.h"
#include "util/error.h"

namespace minfer {

namespace {

struct ServeOptions {
    std::string model, host = "127.0.0.1", alias, api_key, api_key_file, chat_template_file;
    int port = 8080, parallel = 8, threads = 0, max_queue = 64, timeout_s = 600, tensor_parallel = 1;
    int64_t n_ctx = 0, n_ubatch = kDefaultUbatch, kv_mem = 0;
    BackendKind device = BackendKind::Cpu;
    GgmlType kv_type = GgmlType::F32;
    bool metrics = false, deterministic = false;
    Pooling pooling = Pooling::Unspecified;  // --pooling
};

server::ServerOptions server_options(const ServeOptions& o) {
    server::ServerOptions s;
    s.host = o.host;
    s.port = o.port;
    s.metrics = o.metrics;
    s.max_queue = o.max_queue;
    s.timeout_s = o.timeout_s;
    s.pooling = o.pooling;
    s.http_threads = o.parallel + o.max_queue + 16;  // every running or waiting request holds a thread
    if (!o.api_key.empty()) s.keys = server::ApiKeys({o.api_key});
    if (!o.api_key_file.empty()) s.keys = server::ApiKeys::from_file(o.api_key_file);
    if (!o.chat_template_file.empty())
        s.chat_template = read_text_file(o.chat_template_file, "chat template");
    return s;
}

void serve(const ServeOptions& o) {
    // Every thread started from here on inherits the mask, so the signals reach sigwait() below alone.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    server::Server srv(server_options(o));
    const int port = srv.bind();
    srv.start();
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    std::fprintf(stderr, "serve: loading %s\n", path.c_str());
    std::unique_ptr<Model> model = load_model(path, o.device);
    EngineParams ep = engine_params(*model, {o.n_ctx, o.threads, o.device, o.n_ubatch, o.deterministic,
                                             o.kv_type, o.kv_mem, o.tensor_parallel});
    ep.max_seqs = o.parallel;
    const std::string name = o.alias.empty() ? std::filesystem::path(path).filename().string() : o.alias;
    srv.serve_model(std::move(model), ep, name);
    std::printf("listening on http://%s:%d\n", o.host.c_str(), port);
    std::fflush(stdout);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "serve: %s, stopping\n", strsignal(sig));
    srv.shutdown();
    srv.wait();
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* c =
        app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions)");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("--host", o->host, "Address to listen on")->capture_default_str();
    c->add_option("--port", o->port, "Port (0: a free one, printed)")
        ->check(int_in(0, 65535))
        ->capture_default_str();
    c->add_option("--parallel", o->parallel, "Sequences generated at once (also -np)")
        ->check(int_in(1, 1024))
        ->capture_default_str();
    c->add_option("-c,--ctx-size", o->n_ctx,
                  "KV cache tokens shared by all sequences (default: model's, <= 4096)")
        ->check(int_in(0, 1 << 24));
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    add_ubatch_option(*c, o->n_ubatch);
    add_kv_type_option(*c, o->kv_type);
    add_kv_mem_option(*c, o->kv_mem);
    add_tensor_parallel_option(*c, o->tensor_parallel);
    c->add_option("--chat-template-file", o->chat_template_file,
                  "Jinja chat template to use instead of the model's (e.g. one that renders tools)")
        ->check(CLI::ExistingFile);
    c->add_option("--alias", o->alias, "Model id in /v1/models and responses (default: the file name)");
    CLI::Option* key = c->add_option("--api-key", o->api_key, "Require this key (Authorization: Bearer KEY)");
    c->add_option("--api-key-file", o->api_key_file, "Require one of the keys in this file (one per line)")
        ->excludes(key);
    c->add_option_function<std::string>(
         "--pooling",
         [o](const std::string& p) {
             o->pooling = p == "last" ? Pooling::Last : p == "cls" ? Pooling::Cls : Pooling::Mean;
         },
         "How /v1/embeddings pools the rows (default: the model's <arch>.pooling_type, else mean)")
        ->type_name("mean|last|cls")
        ->transform(CLI::IsMember({"mean", "last", "cls"}, CLI::ignore_case));
    c->add_flag("--metrics", o->metrics, "Serve Prometheus metrics at GET /metrics");
    c->add_option("--max-queue", o->max_queue, "Requests waiting beyond --parallel before 503")
        ->check(int_in(0, 4096))
        ->capture_default_str();
    c->add_option("--timeout", o->timeout_s, "Socket read/write timeout in seconds")
        ->check(int_in(1, 86400))
        ->capture_default_str();
    c->add_flag("--deterministic", o->deterministic,
                "Batch-invariant arithmetic: a request's tokens do not depend on what runs beside it");
    c->callback([o] { serve(*o); });
}

}  // namespace minfer
