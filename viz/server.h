// The HTTP side of `minfer viz` (cpp-httplib, the listener of src/server/http.h):
//   GET  /                  the page (viz/web/, CSS and JS inlined)
//   GET  /api/info          model_info plus {busy}
//   GET  /api/graph?graph=prefill|decode                 the graph's document (viz/README.md)
//   GET  /api/svg?graph=prefill|decode&collapse=0,3      its Graphviz SVG, those layers collapsed
//   GET  /api/hist?graph=prefill|decode&node=ID          the node's output histogram, latest step
//   GET  /api/events        server-sent events: hello, then the current generation's start, step,
//                           token and done events (replayed from its start on connect)
//   POST /api/generate      {"prompt", "n_predict", "temperature", "seed"} -> 202 {"id"}; 409 while a
//                           generation runs (one at a time, not queued); 400 for bad input
//   POST /api/stop          cancels the running generation
// Errors are {"error": {"message", "code"}} with their status. A viewer that drops its SSE connection
// only ends its own stream.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "viz/page.h"

namespace minfer::viz {

struct VizOptions {
    std::string host = "127.0.0.1";
    int port = 8081;        // 0: a free port
    bool log = true;        // one line per request on stderr
    int http_threads = 64;  // connections served at once; every SSE viewer holds one
    int64_t max_predict = 512;
};

class VizServer {
  public:
    // `graphs` and `info` describe `s`; all must outlive the server. It installs its LiveObserver on
    // `s` for good: `s` must run no forward pass once the server is gone.
    VizServer(Session& s, const Tokenizer& tok, GraphSet& graphs, nlohmann::json info, VizOptions o);
    ~VizServer();  // shutdown() and wait()

    int bind();       // throws Error when host:port cannot be bound; returns the port
    void start();     // serves on threads of its own
    void shutdown();  // idempotent: ends the SSE streams, cancels the generation, stops listening
    void wait();      // until the listening thread has stopped

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::viz
