// Helpers of the viz tests: the embedded model and a session on it, an in-process `minfer viz` server
// on a free port, SSE parsing, counting substrings, and a raw socket for viewers that vanish mid-stream.
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "raw_socket.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "viz/server.h"

namespace minfer::test {

inline std::string default_model() {
    return std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf";
}

inline size_t count_of(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

inline SessionParams test_session_params() {
    SessionParams p;
    p.n_ctx = 512;
    p.n_threads = 2;
    return p;
}

// The embedded model, one session on it, its tokenizer.
struct MiniModel {
    MiniModel() : model(Model::load(default_model())), session(*model, test_session_params()) {
        tok = Tokenizer::from_gguf(*model->file);
    }
    std::unique_ptr<Model> model;
    Session session;
    std::unique_ptr<Tokenizer> tok;
};

struct VizTestServer {
    VizTestServer() : graphs(mini.session) {
        viz::VizOptions o;
        o.port = 0;
        o.log = false;
        srv = std::make_unique<viz::VizServer>(mini.session, *mini.tok, graphs,
                                               viz::model_info(mini.session, "mini", BackendKind::Cpu), o);
        port = srv->bind();
        srv->start();
    }
    ~VizTestServer() {
        srv->shutdown();
        srv->wait();
    }
    std::unique_ptr<httplib::Client> client() const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
        c->set_read_timeout(60, 0);
        return c;
    }
    MiniModel mini;
    viz::GraphSet graphs;
    std::unique_ptr<viz::VizServer> srv;
    int port = 0;
};

struct SseEvent {
    std::string event;
    nlohmann::json data;
};

// Parses "event: E\ndata: {...}\n\n" blocks (comments and retry lines skipped).
inline std::vector<SseEvent> parse_sse(const std::string& text) {
    std::vector<SseEvent> out;
    size_t at = 0;
    for (size_t end = text.find("\n\n"); end != std::string::npos;
         at = end + 2, end = text.find("\n\n", at)) {
        SseEvent e;
        const std::string block = text.substr(at, end - at);
        for (size_t l = 0; l < block.size();) {
            const size_t nl = std::min(block.find('\n', l), block.size());
            const std::string line = block.substr(l, nl - l);
            if (line.rfind("event: ", 0) == 0) e.event = line.substr(7);
            if (line.rfind("data: ", 0) == 0) e.data = nlohmann::json::parse(line.substr(6));
            l = nl + 1;
        }
        if (!e.event.empty()) out.push_back(std::move(e));
    }
    return out;
}

// Reads /api/events until a "done" event of generation `id` arrives (or the server closes); returns the
// first event (hello) and then that generation's, from its start (a viewer connecting before it began
// first replays the one before).
inline std::vector<SseEvent> read_events_until_done(int port, uint64_t id) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    std::string text;
    c.Get("/api/events", [&](const char* data, size_t n) {
        text.append(data, n);
        for (const SseEvent& e : parse_sse(text))
            if (e.event == "done" && e.data.value("id", uint64_t(0)) == id) return false;
        return true;
    });
    const std::vector<SseEvent> all = parse_sse(text);
    std::vector<SseEvent> out(all.begin(), all.begin() + (all.empty() ? 0 : 1));
    size_t from = all.size();
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i].event == "start" && all[i].data.value("id", uint64_t(0)) == id) from = i;
    out.insert(out.end(), all.begin() + std::ptrdiff_t(from), all.end());
    return out;
}

// A viewer on a raw socket: sends one GET and reads some of the answer, then closes whenever told.
class RawViewer : public RawSocket {
  public:
    using RawSocket::RawSocket;
    bool get(const std::string& path, const std::string& headers = "") {
        return send_request("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n");
    }
};

}  // namespace minfer::test
