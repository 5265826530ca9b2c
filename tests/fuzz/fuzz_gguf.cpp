// libFuzzer target: the GGUF reader, the tokenizer built from the file's vocabulary and the model
// loader, on arbitrary bytes. A malformed file must end in minfer::Error; any other exception, a
// sanitizer report or an out-of-range token id is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

// One in-memory file, rewritten for every input and opened by its /proc path like any model file.
int input_fd() {
    static const int fd = ::memfd_create("fuzz-gguf", MFD_CLOEXEC);
    if (fd < 0) std::abort();
    return fd;
}

void exercise_tokenizer(const minfer::GgufFile& f) {
    const auto tok = minfer::Tokenizer::from_gguf(f);
    const std::vector<int32_t> ids = tok->encode("Hello world, <|im_start|>user\n数字 123", true, true);
    for (int32_t id : ids)
        if (id < 0 || id >= tok->n_vocab()) __builtin_trap();
    tok->decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const int fd = input_fd();
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    try {
        auto file = minfer::GgufFile::open(path);
        try {
            exercise_tokenizer(*file);
        } catch (const minfer::Error&) {
        }
        minfer::Model::from_file(std::move(file));
    } catch (const minfer::Error&) {
    }
    return 0;
}
