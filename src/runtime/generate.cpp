#include "runtime/generate.h"

#include <chrono>

#include "runtime/text_stream.h"
#include "util/error.h"

namespace minfer {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerateResult generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& gp, const std::function<void(std::string_view)>& on_text) {
    Sampler sampler(gp.sampling);
    return generate(s, tok, prompt, gp, sampler, on_text);
}

GenerateResult generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& gp, Sampler& sampler,
                        const std::function<void(std::string_view)>& on_text) {
    if (prompt.empty()) throw Error("the prompt is empty");
    if (s.n_past() + int64_t(prompt.size()) > s.n_ctx())
        throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context of " +
                    std::to_string(s.n_ctx()) + " (use -c to raise it)");
    GenerateResult r;
    for (int32_t id : prompt) sampler.accept(id);
    TextStream text(tok, gp.stop, !gp.special);
    auto emit = [&](std::string_view piece) {
        if (on_text && !piece.empty()) on_text(piece);
    };

    auto t0 = std::chrono::steady_clock::now();
    std::span<const float> logits = s.forward(prompt, 1);
    r.prefill_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    while (int64_t(r.ids.size()) < gp.n_predict && !(gp.should_stop && gp.should_stop())) {
        const int32_t id = sampler.sample(logits.last(size_t(s.model().hp.n_vocab)));
        if (tok.is_eog(id) && !gp.ignore_eos) break;
        sampler.accept(id);
        r.ids.push_back(id);
        if (text.feed(id)) break;
        emit(text.take());
        if (int64_t(r.ids.size()) >= gp.n_predict) break;
        if (s.n_past() >= s.n_ctx()) {
            r.hit_context_limit = true;
            break;
        }
        logits = s.forward(std::span<const int32_t>(&r.ids.back(), 1), 1);
    }
    r.decode_s = seconds_since(t0);
    emit(text.finish());
    r.text = text.text();
    return r;
}

}  // namespace minfer
