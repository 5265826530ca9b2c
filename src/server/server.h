// minfer's OpenAI-compatible HTTP server (cpp-httplib): GET /health, /v1/models, /metrics; POST
// /v1/chat/completions, /v1/completions (streaming or not), /v1/embeddings, /tokenize, /detokenize,
// /apply-template.
// It listens before the model is loaded (/health answers 503 until then), runs one scheduler thread
// that owns the engine (EngineLoop), and renders every failure in OpenAI's error envelope: 400 for bad
// input, 401 for a missing or wrong key, 404 for an unknown route, 413 for a body over the limit, 503
// with Retry-After for a full queue. A handler never lets an exception out.
//
//   Server s(options);
//   const int port = s.bind();             // port 0: a free one
//   s.start();                             // listening; /health 503
//   s.serve_model(std::move(model), engine_params, "qwen2");   // /health 200
//   ... s.shutdown(); s.wait();            // stop accepting, finish or cancel in flight, join
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/auth.h"

namespace minfer::server {

struct Metrics;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;       // 0: a free port
    ApiKeys keys;          // none: no key is asked
    bool metrics = false;  // GET /metrics (otherwise 501)
    int max_queue = 64;    // choices waiting beyond the engine's sequence slots before a 503
    int timeout_s = 600;   // socket read and write timeout
    size_t body_limit = size_t(4) << 20;
    std::chrono::milliseconds grace{5000};  // shutdown: how long in-flight requests may finish
    bool log = true;                        // one line per request on stderr
    int http_threads = 0;  // connections served at once (each stream holds one); 0: max_queue + 64
    // How /v1/embeddings pools (--pooling); Unspecified: the model's <arch>.pooling_type, else mean.
    Pooling pooling = Pooling::Unspecified;
    std::string chat_template;  // replaces the GGUF's tokenizer.chat_template; empty: the GGUF's
};

class Server {
  public:
    explicit Server(ServerOptions o);
    ~Server();  // shutdown() and wait()

    int bind();    // throws Error when host:port cannot be bound; returns the port
    void start();  // serves on threads of its own
    // Takes the model, builds its engine and starts the scheduler thread; `name` is the model id that
    // /v1/models and responses report.
    void serve_model(std::unique_ptr<Model> model, const EngineParams& p, const std::string& name);
    void shutdown();  // idempotent; any thread
    void wait();      // until the listening thread has stopped
    const Metrics& metrics() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::server
