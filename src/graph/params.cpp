#include "graph/params.h"

#include <cstdlib>
#include <cstring>

namespace minfer {

namespace {
bool env_set(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}
}  // namespace

CParams CParams::from_env(int64_t n_ctx, bool gpu) {
    CParams c;
    c.n_ctx = n_ctx;
    c.gpu = gpu;
    c.fuse_qkv = !env_set("MINFER_NO_FUSE_QKV");
    c.fuse_ffn = !env_set("MINFER_NO_FUSE_FFN");
    return c;
}

}  // namespace minfer
