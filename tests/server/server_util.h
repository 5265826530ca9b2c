// Helpers of the server tests: an in-process `minfer serve` on a free port with the embedded model, a
// client that sends its key, server-sent-event parsing, Prometheus lookups, a raw socket for clients that
// vanish mid-stream, and this process's resident memory.
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "invariant_params.h"
#include "models/model.h"
#include "raw_socket.h"
#include "server/server.h"

namespace minfer::test {

inline std::string default_model() {
    return std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf";
}

inline constexpr const char* kKey = "test-key-0123456789";

// Batch-invariant, so a request's greedy tokens are those of the same prompt run alone.
inline EngineParams test_engine_params(int max_seqs, int64_t n_ctx = 4096) {
    return invariant_params(max_seqs, n_ctx);
}

struct TestServer {
    explicit TestServer(server::ServerOptions o = {}, EngineParams p = test_engine_params(32),
                        const std::string& model = default_model()) {
        o.port = 0;
        o.metrics = true;
        o.log = false;
        if (!o.keys.enabled()) o.keys = server::ApiKeys({kKey});
        srv = std::make_unique<server::Server>(o);
        port = srv->bind();
        srv->start();
        srv->serve_model(Model::load(model), p, "mini");
    }
    ~TestServer() {
        srv->shutdown();
        srv->wait();
    }
    std::unique_ptr<httplib::Client> client(bool with_key = true) const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
        c->set_read_timeout(60, 0);
        if (with_key) c->set_bearer_token_auth(kKey);
        return c;
    }

    std::unique_ptr<server::Server> srv;
    int port = 0;
};

inline nlohmann::json body_json(const httplib::Result& r) {
    if (!r) return nullptr;
    return nlohmann::json::parse(r->body, nullptr, false);
}

// The JSON of every "data:" event before [DONE]; `done` tells whether [DONE] came last.
inline std::vector<nlohmann::json> sse_events(const std::string& body, bool& done) {
    std::vector<nlohmann::json> out;
    done = false;
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("data: ", 0) != 0) continue;
        const std::string data = line.substr(6);
        EXPECT_FALSE(done) << "an event after [DONE]";
        if (data == "[DONE]")
            done = true;
        else
            out.push_back(nlohmann::json::parse(data));
    }
    return out;
}

// The value of a Prometheus line `name value`, or -1.
inline double metric(const std::string& text, const std::string& name) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    return -1;
}

inline size_t rss_bytes() {
    std::ifstream f("/proc/self/statm");
    size_t pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * size_t(sysconf(_SC_PAGESIZE));
}

// A client on a raw socket: sends one request and reads what arrives, then closes whenever told.
class RawClient : public RawSocket {
  public:
    using RawSocket::RawSocket;
    bool post(const std::string& path, const std::string& body) {
        return send_request("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kKey +
                            "\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
    }
};

}  // namespace minfer::test
