#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace minfer {

namespace {

// The Split regexes of the HF tokenizer.json files (llama.cpp uses the same ones for these names).
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Mistral's tekken (tokenizer.json; tekken.json for mistral-common's tiktoken): a letter run ends where
// lower case turns to upper ("getHTTPResponseCode" -> "get", "HTTPResponse", "Code"), combining marks
// stay in the run, digits go one by one, a punctuation run keeps trailing newlines and slashes, and
// there are no contraction alternatives. llama.cpp keeps this regex only as a comment: its std::regex
// path has no \p{Lu} and kin, so it runs [^a-z] and [^A-Z] over \p{L} instead, which takes every
// non-ASCII letter for both cases and leaves combining marks out of letter runs.
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// OpenAI's o200k (GPT-4o; o200k_harmony of gpt-oss): tiktoken's o200k_base pat_str
// (tiktoken_ext/openai_public.py), which llama.cpp keeps as the "original regex from tokenizer.json" of
// LLAMA_VOCAB_PRE_TYPE_GPT4O. It is tekken's letter runs with an optional contraction after each
// ("HELLO'S", "John's" stay whole), digits in runs of up to 3, and punctuation runs that keep trailing
// newlines and slashes. llama.cpp runs an approximation: [^a-z] and [^A-Z] over \p{L} (every non-ASCII
// letter counts as both cases, combining marks leave letter runs) and ASCII-only contraction cases.
constexpr const char* kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
    return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct PreTokenizerImpl {
    pcre2_code* code = nullptr;
    ~PreTokenizerImpl() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::string_view name, const std::string& file)
    : impl_(std::make_unique<PreTokenizerImpl>()), file_(file) {
    const char* pattern = nullptr;
    if (name == "qwen2") {
        pattern = kQwen2Regex;
        nfc_ = true;
    } else if (name == "llama-bpe") {
        pattern = kLlama3Regex;
        ignore_merges_ = true;
    } else if (name == "tekken") {  // no normalizer; tiktoken looks a whole piece up before merging
        pattern = kTekkenRegex;
        ignore_merges_ = true;
    } else if (name == "gpt-4o") {
        // No normalizer (tiktoken has none; llama.cpp applies none for GPT4O). tiktoken's encoder looks a
        // whole piece up in the ranks before merging (llama.cpp does not set ignore_merges for "gpt-4o").
        pattern = kGpt4oRegex;
        ignore_merges_ = true;
    } else if (name == "gpt-2" || name == "default") {
        pattern = kGpt2Regex;
    } else {
        throw Error(file + ": unsupported pre-tokenizer tokenizer.ggml.pre = '" + std::string(name) +
                    "' (supported: qwen2, llama-bpe, tekken, gpt-4o, gpt-2, default)");
    }
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (!impl_->code)
        throw Error(file + ": pre-tokenizer regex does not compile at offset " + std::to_string(err_offset) +
                    ": " + pcre2_message(err));
    const int jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
    if (jit != 0 && jit != PCRE2_ERROR_JIT_BADOPTION)
        throw Error(file + ": pre-tokenizer regex JIT compilation failed: " + pcre2_message(jit));
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> out;
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
        pcre2_match_data_create_from_pattern(impl_->code, nullptr));
    if (!md) throw Error(file_ + ": out of memory for the pre-tokenizer match data");
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    size_t covered = 0;  // text before this offset is already in `out`
    while (pos < text.size()) {
        const int rc =
            pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) throw Error(file_ + ": pre-tokenizer regex failed: " + pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t start = ov[0];
        const size_t end = ov[1];
        if (end == start) {  // an empty match splits nothing; step over one character
            if (start >= text.size()) break;
            pos = start + unicode::decode_utf8(text, start).len;
            continue;
        }
        if (start > covered) out.push_back(text.substr(covered, start - covered));
        out.push_back(text.substr(start, end - start));
        pos = covered = end;
    }
    if (covered < text.size()) out.push_back(text.substr(covered));
    return out;
}

}  // namespace minfer
