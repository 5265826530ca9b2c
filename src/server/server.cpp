#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <cstdio>

#include "gguf/gguf.h"
#include "models/model.h"
#include "server/api_error.h"
#include "server/completions.h"
#include "server/embeddings.h"
#include "server/engine_loop.h"
#include "server/http.h"
#include "server/messages.h"
#include "server/metrics.h"
#include "server/prompt.h"
#include "server/render.h"
#include "server/responses.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace minfer::server {

using httplib::Request;
using httplib::Response;
using nlohmann::json;

RequestTokens& request_tokens() {
    thread_local RequestTokens t;
    return t;
}

namespace {

thread_local Clock::time_point t_request;  // when the request's headers were read; zero otherwise

void send_error(Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(error_json(e), "application/json");
}

void send_json(Response& res, const json& j) {
    res.set_content(dump(j), "application/json");
}

bool is_public(const std::string& path) {
    return path == "/health" || path == "/v1/health" || path == "/v1/models" || path == "/models";
}

// Every handler through this: request errors become their status, anything else a 500 naming it.
template <class Fn>
httplib::Server::Handler guarded(Fn fn) {
    return [fn](const Request& req, Response& res) {
        try {
            fn(req, res);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const Error& e) {
            send_error(res, bad_request(e.what()));
        } catch (const json::exception& e) {
            send_error(res, bad_request(e.what()));
        } catch (const std::exception& e) {
            send_error(res, {500, "server_error", "internal_error", e.what()});
        }
    };
}

}  // namespace

struct Server::Impl {
    explicit Impl(ServerOptions o) : opt(std::move(o)) {}

    void routes();
    void hooks();
    const PromptBuilder& ready_prompt() const;
    void tokenize(const Request& req, Response& res) const;
    void detokenize(const Request& req, Response& res) const;
    void apply_template(const Request& req, Response& res) const;
    void models(Response& res) const;

    ServerOptions opt;
    httplib::Server http;
    Metrics metrics;
    std::atomic<bool> ready{false}, stopping{false};
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<PromptBuilder> prompt;
    std::unique_ptr<EngineLoop> loop;  // declared last: destroyed before the model it runs
    std::string name;
    Listener listener{http};
};

const PromptBuilder& Server::Impl::ready_prompt() const {
    if (stopping) throw ApiError(503, "unavailable_error", "unavailable", "the server is shutting down");
    if (!ready) throw ApiError(503, "unavailable_error", "unavailable", "the model is loading");
    return *prompt;
}

// {"content": STRING, "add_special": BOOL, "with_pieces": BOOL} -> {"tokens": [...]}
void Server::Impl::tokenize(const Request& req, Response& res) const {
    const PromptBuilder& p = ready_prompt();
    const json body = parse_json_object(req.body);
    const json content = body.value("content", json());
    if (!content.is_string()) throw bad_request("'content' must be a string", "invalid_type");
    const bool special = body.value("add_special", false), pieces = body.value("with_pieces", false);
    const std::vector<int32_t> ids = p.tokenizer().encode(content.get<std::string>(), special, true);
    json tokens = json::array();
    for (const int32_t id : ids)
        tokens.push_back(pieces ? json{{"id", id}, {"piece", p.tokenizer().token_to_bytes(id)}} : json(id));
    send_json(res, {{"tokens", tokens}});
}

// {"tokens": [ids]} -> {"content": STRING}
void Server::Impl::detokenize(const Request& req, Response& res) const {
    const PromptBuilder& p = ready_prompt();
    const json body = parse_json_object(req.body);
    const json tokens = body.value("tokens", json());
    if (!tokens.is_array()) throw bad_request("'tokens' must be an array of token ids", "invalid_type");
    std::vector<int32_t> ids;
    for (const json& t : tokens) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= p.tokenizer().n_vocab())
            throw bad_request("'tokens' holds " + t.dump() + "; token ids are integers in [0, " +
                              std::to_string(p.tokenizer().n_vocab()) + ")");
        ids.push_back(t.get<int32_t>());
    }
    send_json(res, {{"content", p.tokenizer().decode(ids)}});
}

// A chat request -> {"prompt": STRING}: the prompt /v1/chat/completions would run (the template applied
// with the generation prompt, tools and the template's arguments, a forced call's start).
void Server::Impl::apply_template(const Request& req, Response& res) const {
    const PromptBuilder& p = ready_prompt();
    const CompletionRequest r = parse_completion_request(req.body, Endpoint::Chat, {loop->n_ctx(), 16});
    send_json(res, {{"prompt", p.prepare(r).text}});
}

void Server::Impl::models(Response& res) const {
    ready_prompt();
    const json m = {
        {"id", name},
        {"object", "model"},
        {"created", make_meta(Endpoint::Completion, name).created},
        {"owned_by", "minfer"},
        {"meta", {{"n_ctx", loop->n_ctx()}, {"n_vocab", tok->n_vocab()}, {"n_parallel", loop->max_seqs()}}}};
    send_json(res, {{"object", "list"}, {"data", json::array({m})}});
}

void Server::Impl::routes() {
    http.Get("/health", guarded([this](const Request&, Response& res) {
                 ready_prompt();
                 send_json(res, {{"status", "ok"}});
             }));
    http.Get("/v1/models", guarded([this](const Request&, Response& res) { models(res); }));
    http.Get("/models", guarded([this](const Request&, Response& res) { models(res); }));
    for (const auto& [path, endpoint] : {std::pair{"/v1/chat/completions", Endpoint::Chat},
                                         {"/chat/completions", Endpoint::Chat},
                                         {"/v1/completions", Endpoint::Completion},
                                         {"/completions", Endpoint::Completion}})
        http.Post(path, guarded([this, endpoint = endpoint](const Request& req, Response& res) {
                      const PromptBuilder& p = ready_prompt();
                      handle_completion({*loop, p, name}, req, res, endpoint);
                  }));
    http.Post("/v1/messages", [this](const Request& req, Response& res) {
        anthropic_guarded(res, [&] { handle_messages({*loop, ready_prompt(), name}, req, res); });
    });
    for (const char* path : {"/v1/responses", "/responses"})
        http.Post(path, guarded([this](const Request& req, Response& res) {
                      handle_responses({*loop, ready_prompt(), name}, req, res);
                  }));
    http.Post("/v1/embeddings", guarded([this](const Request& req, Response& res) {
                  const Tokenizer& t = ready_prompt().tokenizer();  // 503 until the model is loaded
                  handle_embeddings({*loop, t, name, opt.pooling}, req, res);
              }));
    http.Post("/tokenize", guarded([this](const Request& req, Response& res) { tokenize(req, res); }));
    http.Post("/detokenize", guarded([this](const Request& req, Response& res) { detokenize(req, res); }));
    http.Post("/apply-template",
              guarded([this](const Request& req, Response& res) { apply_template(req, res); }));
    http.Get("/metrics", guarded([this](const Request&, Response& res) {
                 if (!opt.metrics)
                     throw ApiError(501, "not_supported_error", "not_supported",
                                    "metrics are off (start with --metrics)");
                 res.set_content(metrics.render(), "text/plain; version=0.0.4");
             }));
}

// The key check before routing, the error envelope for httplib's own errors (404, 413, 400), the log line.
void Server::Impl::hooks() {
    http.set_pre_routing_handler([this](const Request& req, Response& res) {
        t_request = Clock::now();
        request_tokens() = {};
        if (!opt.keys.enabled() || is_public(req.path) ||
            opt.keys.accepts(req.get_header_value("Authorization"), req.get_header_value("X-Api-Key")))
            return httplib::Server::HandlerResponse::Unhandled;
        const ApiError e{401, "authentication_error", "invalid_api_key", "a valid API key is required"};
        if (anthropic_route(req.path))
            send_anthropic_error(res, e);  // Anthropic's SDKs read their own envelope
        else
            send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404)
            send_error(res,
                       {404, "not_found_error", "not_found", "no route for " + req.method + " " + req.path});
        else if (res.status == 413)
            send_error(res, {413, "invalid_request_error", "payload_too_large",
                             "the body is over the limit of " + std::to_string(opt.body_limit) + " bytes"});
        else
            send_error(res, {res.status, "invalid_request_error", "",
                             "the request could not be read (HTTP " + std::to_string(res.status) + ")"});
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_logger([this](const Request& req, const Response& res) {
        if (!opt.log) return;
        const RequestTokens t = request_tokens();
        const double ms = t_request == Clock::time_point()
                              ? 0.0
                              : std::chrono::duration<double, std::milli>(Clock::now() - t_request).count();
        std::fprintf(stderr, "%s %s %d prompt=%lld generated=%lld %.1f ms\n", req.method.c_str(),
                     req.path.c_str(), res.status, (long long)t.prompt, (long long)t.generated, ms);
        t_request = {};
    });
}

Server::Server(ServerOptions o) : impl_(std::make_unique<Impl>(std::move(o))) {
    Impl& s = *impl_;
    const auto threads = size_t(s.opt.http_threads > 0 ? s.opt.http_threads : s.opt.max_queue + 64);
    s.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.http.set_payload_max_length(s.opt.body_limit);
    s.http.set_read_timeout(s.opt.timeout_s, 0);
    s.http.set_write_timeout(s.opt.timeout_s, 0);
    s.routes();
    s.hooks();
}

Server::~Server() {
    shutdown();
    wait();
}

int Server::bind() {
    return impl_->listener.bind(impl_->opt.host, impl_->opt.port);
}

void Server::start() {
    impl_->listener.start();
}

void Server::serve_model(std::unique_ptr<Model> model, const EngineParams& p, const std::string& name) {
    Impl& s = *impl_;
    s.tok = Tokenizer::from_gguf(*model->file);
    s.prompt = std::make_unique<PromptBuilder>(*model->file, *s.tok, s.opt.chat_template);
    s.model = std::move(model);
    s.loop = std::make_unique<EngineLoop>(*s.model, p, *s.tok, s.metrics, LoopOptions{s.opt.max_queue});
    s.name = name;
    s.ready = true;
}

void Server::shutdown() {
    Impl& s = *impl_;
    if (s.stopping.exchange(true)) return;
    if (s.ready) s.loop->drain(s.opt.grace);
    s.http.stop();
}

void Server::wait() {
    impl_->listener.join();
}

const Metrics& Server::metrics() const {
    return impl_->metrics;
}

}  // namespace minfer::server
