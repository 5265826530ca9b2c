// minfer viz: the live compute-graph page (viz/). It plans the prefill and decode graphs of the model
// (the embedded one without -m), lays them out with Graphviz, serves the page and its SSE stream and
// prints "viz: open http://HOST:PORT/" once it serves; SIGINT or SIGTERM stop it (exit 0). With
// --export FILE.html it writes one self-contained page instead, and exits.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common.h"
#include "models/model.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "viz/server.h"

namespace minfer {

namespace {

struct VizCliOptions {
    std::string model, host = "127.0.0.1", export_path;
    int port = 8081, threads = 0;
    int64_t n_ctx = 2048;
    BackendKind device = BackendKind::Cpu;
};

void write_export(viz::GraphSet& graphs, const nlohmann::json& info, const std::string& path) {
    const std::string page = viz::export_page(graphs, info);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot open for writing");
    f << page;
    if (!f) throw Error(path + ": write failed");
    std::printf("viz: wrote %s (%zu bytes; %zu prefill and %zu decode nodes)\n", path.c_str(), page.size(),
                graphs.view(viz::GraphKind::Prefill).graph.nodes.size(),
                graphs.view(viz::GraphKind::Decode).graph.nodes.size());
}

void serve(viz::VizServer& srv, const VizCliOptions& o, int port) {
    // Blocked before the server's threads start, so the signals reach sigwait() below alone.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    srv.start();
    std::printf("viz: open http://%s:%d/\n", o.host.c_str(), port);
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "viz: %s, stopping\n", strsignal(sig));
    srv.shutdown();
    srv.wait();
}

void viz_main(const VizCliOptions& o) {
    const std::string path = o.model.empty() ? default_model_path() : o.model;
    std::unique_ptr<Model> model = load_model(path, o.device);
    SessionParams sp;
    sp.n_ctx = o.n_ctx;
    sp.n_threads = o.threads;
    sp.device = o.device;
    Session session(*model, sp);
    const auto tok = Tokenizer::from_gguf(*model->file);
    const auto t0 = std::chrono::steady_clock::now();
    viz::GraphSet graphs(session);
    const std::chrono::duration<double> laid = std::chrono::steady_clock::now() - t0;
    std::fprintf(stderr, "viz: %s, graphs planned and laid out in %.2f s\n", path.c_str(), laid.count());
    const nlohmann::json info =
        viz::model_info(session, std::filesystem::path(path).filename().string(), o.device);
    if (!o.export_path.empty()) return write_export(graphs, info, o.export_path);

    viz::VizOptions vo;
    vo.host = o.host;
    vo.port = o.port;
    viz::VizServer srv(session, *tok, graphs, info, vo);
    const int port = srv.bind();  // before anything else: a busy port is an error at once
    serve(srv, o, port);
}

}  // namespace

void add_viz_command(CLI::App& app) {
    auto o = std::make_shared<VizCliOptions>();
    CLI::App* c = app.add_subcommand("viz", "Live compute-graph page: per-node times and values over SSE");
    c->add_option("-m,--model", o->model, "GGUF model (default: the embedded model)");
    c->add_option("--host", o->host, "Address to listen on")->capture_default_str();
    c->add_option("--port", o->port, "Port (0: a free one, printed)")
        ->check(int_in(0, 65535))
        ->capture_default_str();
    c->add_option("-c,--ctx-size", o->n_ctx, "Context size (prompt and generated tokens)")
        ->check(int_in(16, 1 << 20))
        ->capture_default_str();
    c->add_option("-t,--threads", o->threads, "Threads (default: all cores)")->check(int_in(0, 1024));
    add_device_option(*c, o->device);
    c->add_option("--export", o->export_path,
                  "Write one self-contained page (no server, no network) and exit");
    c->callback([o] { viz_main(*o); });
}

}  // namespace minfer
