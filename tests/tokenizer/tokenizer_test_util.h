// Shared helpers of the tokenizer tests: each vocabulary is loaded once per test binary.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace minfer::test {

// The tokenizer of shared model `file` (callers check the file exists first).
inline const Tokenizer& shared_tokenizer(const std::string& file) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
    auto& slot = loaded[file];
    if (!slot) slot = Tokenizer::from_gguf(*GgufFile::open(model_path(file)));
    return *slot;
}

}  // namespace minfer::test
