#include "viz/runner.h"

#include "runtime/generate.h"
#include "util/error.h"

namespace minfer::viz {

using nlohmann::json;

Runner::~Runner() {
    cancel_ = true;
    std::lock_guard lock(mu_);
    if (worker_.joinable()) worker_.join();
}

bool Runner::start(GenerationAsk a, uint64_t& id) {
    std::lock_guard lock(mu_);
    if (busy_) return false;
    if (worker_.joinable()) worker_.join();  // the last one has finished: busy_ is false
    busy_ = true;
    cancel_ = false;
    id = next_id_++;
    worker_ = std::thread([this, a = std::move(a), id] { run(a, id); });
    return true;
}

void Runner::run(const GenerationAsk& a, uint64_t id) {
    log_.reset();
    hists_.clear();
    log_.publish("start", {{"id", id},
                           {"prompt", a.prompt},
                           {"prompt_ids", a.ids},
                           {"n_predict", a.n_predict},
                           {"temperature", a.temperature}});
    GenerateParams gp;
    gp.n_predict = a.n_predict;
    gp.sampling.temp = a.temperature;
    gp.sampling.seed = a.seed;
    gp.should_stop = [this] { return cancel_.load(); };
    int64_t index = 0;
    json done = {{"id", id}};
    try {
        s_.reset();
        const GenerateResult r = generate(s_, tok_, a.ids, gp, [&](std::string_view text) {
            log_.publish("token", {{"index", index++}, {"text", std::string(text)}});
        });
        done.update({{"text", r.text},
                     {"n_generated", r.ids.size()},
                     {"prefill_ms", r.prefill_s * 1e3},
                     {"decode_ms", r.decode_s * 1e3},
                     {"cancelled", cancel_.load()},
                     {"hit_context_limit", r.hit_context_limit}});
    } catch (const std::exception& e) {
        done["error"] = e.what();
    }
    log_.publish("done", done);
    busy_ = false;
}

}  // namespace minfer::viz
