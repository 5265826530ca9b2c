#include "viz/server.h"

#include <httplib.h>

#include <atomic>
#include <cstdio>

#include "server/http.h"
#include "util/error.h"
#include "viz/runner.h"

namespace minfer::viz {

using httplib::Request;
using httplib::Response;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// httplib compresses application/json and image/svg+xml, with Brotli at its slowest quality when the
// browser accepts it (seconds for a 0.5B graph's SVG); a charset parameter keeps it from doing so.
constexpr const char* kJson = "application/json; charset=utf-8";
constexpr const char* kSvg = "image/svg+xml; charset=utf-8";

struct HttpError : Error {
    HttpError(int status, std::string code, const std::string& message)
        : Error(message), status(status), code(std::move(code)) {}
    int status;
    std::string code;
};

void send_error(Response& res, int status, const std::string& code, const std::string& message) {
    res.status = status;
    res.set_content(server::dump({{"error", {{"message", message}, {"code", code}}}}), kJson);
}

void send_json(Response& res, const json& j, int status = 200) {
    res.status = status;
    res.set_content(server::dump(j), kJson);
}

// Every handler through this: request errors become their status, anything else a 500 naming it.
template <class Fn>
httplib::Server::Handler guarded(Fn fn) {
    return [fn](const Request& req, Response& res) {
        try {
            fn(req, res);
        } catch (const HttpError& e) {
            send_error(res, e.status, e.code, e.what());
        } catch (const Error& e) {
            send_error(res, 400, "bad_request", e.what());
        } catch (const json::exception& e) {
            send_error(res, 400, "bad_request", e.what());
        } catch (const std::exception& e) {
            send_error(res, 500, "internal_error", e.what());
        }
    };
}

GraphKind graph_param(const Request& req) {
    return parse_kind(req.has_param("graph") ? req.get_param_value("graph") : "prefill");
}

int64_t int_value(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
    size_t used = 0;
    int64_t v = 0;
    try {
        v = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size() || v < lo || v > hi)
        throw Error(what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], got '" + text + "'");
    return v;
}

// "0,3,7" -> {0, 3, 7}, each a layer of the graph.
std::set<int> layer_list(const std::string& text, int n_layer) {
    std::set<int> out;
    size_t at = 0;
    while (at < text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        out.insert(int(int_value(text.substr(at, comma - at), "collapse: a layer", 0, n_layer - 1)));
        at = comma + 1;
    }
    return out;
}

template <class T>
T field(const json& body, const char* name, T fallback, bool (json::*is)() const noexcept, const char* type) {
    if (!body.contains(name)) return fallback;
    if (!(body[name].*is)()) throw Error(std::string("'") + name + "' must be " + type);
    return body[name].get<T>();
}

}  // namespace

struct VizServer::Impl {
    Impl(Session& s, const Tokenizer& tok, GraphSet& graphs, json info, VizOptions o)
        : opt(std::move(o)), tok(tok), graphs(graphs), info(std::move(info)), runner(s, tok, log, hists) {
        s.add_observer(std::make_unique<LiveObserver>(log, hists));
    }
    void routes();
    void events(Response& res);
    void generate(const Request& req, Response& res);
    GenerationAsk parse_ask(const std::string& text) const;

    VizOptions opt;
    const Tokenizer& tok;
    GraphSet& graphs;
    json info;
    httplib::Server http;
    server::Listener listener{http};
    EventLog log;
    HistogramStore hists;
    Runner runner;  // after the log it publishes to
    std::atomic<bool> stopping{false};
};

GenerationAsk VizServer::Impl::parse_ask(const std::string& text) const {
    const json body = json::parse(text);
    if (!body.is_object()) throw Error("the body must be a JSON object");
    GenerationAsk a;
    a.prompt = field<std::string>(body, "prompt", "", &json::is_string, "a string");
    if (a.prompt.empty()) throw Error("'prompt' must be a non-empty string");
    a.n_predict = field<int64_t>(body, "n_predict", 16, &json::is_number_integer, "an integer");
    if (a.n_predict < 1 || a.n_predict > opt.max_predict)
        throw Error("'n_predict' must be in [1, " + std::to_string(opt.max_predict) + "]");
    a.temperature = field<float>(body, "temperature", 0.0f, &json::is_number, "a number");
    if (!(a.temperature >= 0 && a.temperature <= 10)) throw Error("'temperature' must be in [0, 10]");
    a.seed = field<uint64_t>(body, "seed", 0, &json::is_number_unsigned, "a non-negative integer");
    a.ids = tok.encode(a.prompt, true, true);
    if (int64_t(a.ids.size()) >= runner.n_ctx())
        throw Error("the prompt has " + std::to_string(a.ids.size()) + " tokens; the context holds " +
                    std::to_string(runner.n_ctx()));
    return a;
}

void VizServer::Impl::generate(const Request& req, Response& res) {
    if (stopping) throw HttpError(503, "stopping", "the server is shutting down");
    GenerationAsk a = parse_ask(req.body);
    uint64_t id = 0;
    if (!runner.start(std::move(a), id))
        throw HttpError(409, "busy",
                        "a generation is running (one at a time): wait for its done event or POST /api/stop");
    send_json(res, {{"id", id}}, 202);
}

// One viewer: hello, then every event of the current generation from its start, then each as it comes.
void VizServer::Impl::events(Response& res) {
    res.set_header("Cache-Control", "no-cache");
    auto cursor = std::make_shared<EventLog::Cursor>();
    auto greeted = std::make_shared<bool>(false);
    auto idle = std::make_shared<int>(0);
    res.set_chunked_content_provider(
        "text/event-stream", [this, cursor, greeted, idle](size_t, httplib::DataSink& sink) {
            if (log.closed()) {
                sink.done();
                return true;
            }
            std::string out;
            if (!*greeted) {
                json hello = info;
                hello["busy"] = runner.busy();
                out = "retry: 1000\n\n" + server::sse_event("hello", hello);
                *greeted = true;
            }
            out += log.wait(*cursor, 250ms);
            *idle = out.empty() ? *idle + 1 : 0;
            if (*idle >= 40) {  // 10 s of silence: a comment, so a vanished viewer is noticed
                out = ": keep-alive\n\n";
                *idle = 0;
            }
            return out.empty() || sink.write(out.data(), out.size());
        });
}

void VizServer::Impl::routes() {
    http.Get("/", guarded([](const Request&, Response& res) {
                 res.set_content(render_page(nullptr), "text/html; charset=utf-8");
             }));
    http.Get("/api/info", guarded([this](const Request&, Response& res) {
                 json j = info;
                 j["busy"] = runner.busy();
                 send_json(res, j);
             }));
    http.Get("/api/graph", guarded([this](const Request& req, Response& res) {
                 send_json(res, graphs.doc(graph_param(req)));
             }));
    http.Get("/api/svg", guarded([this](const Request& req, Response& res) {
                 const GraphKind k = graph_param(req);
                 const std::string c = req.has_param("collapse") ? req.get_param_value("collapse") : "";
                 res.set_content(graphs.svg(k, layer_list(c, graphs.view(k).n_layer)), kSvg);
             }));
    http.Get("/api/hist", guarded([this](const Request& req, Response& res) {
                 const GraphKind k = graph_param(req);
                 const auto n = int64_t(graphs.view(k).graph.nodes.size());
                 const std::string node = req.has_param("node") ? req.get_param_value("node") : "";
                 const auto id = NodeId(int_value(node, "node", 0, n - 1));
                 Histogram h;
                 if (!hists.get(k, id, h))
                     throw HttpError(404, "no_data",
                                     "node " + node + " has no observed output yet (run a generation)");
                 send_json(res, histogram_json(h, k));
             }));
    http.Get("/api/events", [this](const Request&, Response& res) { events(res); });
    http.Post("/api/generate", guarded([this](const Request& req, Response& res) { generate(req, res); }));
    http.Post("/api/stop", guarded([this](const Request&, Response& res) {
                  runner.cancel();
                  send_json(res, {{"busy", runner.busy()}});
              }));
}

VizServer::VizServer(Session& s, const Tokenizer& tok, GraphSet& graphs, json info, VizOptions o)
    : impl_(std::make_unique<Impl>(s, tok, graphs, std::move(info), std::move(o))) {
    Impl& v = *impl_;
    v.http.new_task_queue = [n = size_t(v.opt.http_threads)] { return new httplib::ThreadPool(n); };
    v.http.set_payload_max_length(size_t(1) << 20);
    v.http.set_error_handler(httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res, res.status, res.status == 404 ? "not_found" : "bad_request",
                   res.status == 404
                       ? "no route for " + req.method + " " + req.path
                       : "the request could not be read (HTTP " + std::to_string(res.status) + ")");
        return httplib::Server::HandlerResponse::Handled;
    }));
    v.http.set_logger([&v](const Request& req, const Response& res) {
        if (v.opt.log) std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
    v.routes();
}

VizServer::~VizServer() {
    shutdown();
    wait();
}

int VizServer::bind() {
    return impl_->listener.bind(impl_->opt.host, impl_->opt.port);
}

void VizServer::start() {
    impl_->listener.start();
}

void VizServer::shutdown() {
    Impl& v = *impl_;
    if (v.stopping.exchange(true)) return;
    v.runner.cancel();
    v.log.close();
    v.http.stop();
}

void VizServer::wait() {
    impl_->listener.join();
}

}  // namespace minfer::viz
