// POST /v1/embeddings as OpenAI defines it. The body: input (a string, an array of strings, an array of
// token ids, or an array of arrays of token ids; at most 2048 inputs, none empty or longer than the
// context), model (any string: one model is served), encoding_format ("float", the default, or
// "base64": each vector's little-endian float32 bytes), dimensions (only the model's width: minfer does
// not shorten vectors), user (ignored). The answer: {object: "list", data: [{object: "embedding",
// index, embedding}], model, usage: {prompt_tokens, total_tokens}}.
//
// Text is tokenized as for a completion (BOS when the vocabulary asks, special tokens parsed) plus EOS
// when the GGUF sets tokenizer.ggml.add_eos_token, as llama.cpp tokenizes embedding inputs; token ids are
// used as given. Each vector is the final norm's hidden states pooled as runtime/embed.h says (minfer
// serve --pooling, else the model's <arch>.pooling_type, else mean) and L2-normalised.
#pragma once
#include <string>

#include "models/model.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace minfer {
class Tokenizer;
}

namespace minfer::server {

class EngineLoop;

struct EmbeddingsContext {
    EngineLoop& loop;
    const Tokenizer& tok;
    std::string model_name;
    Pooling pooling;  // minfer serve --pooling; Unspecified: the model's
};

// Throws ApiError for every request problem (400 naming the field); the caller renders it.
void handle_embeddings(const EmbeddingsContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace minfer::server
