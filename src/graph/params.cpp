#include "graph/params.h"

#include "util/env.h"

namespace minfer {

CParams CParams::from_env(int64_t n_ctx, bool gpu) {
    CParams c;
    c.n_ctx = n_ctx;
    c.gpu = gpu;
    c.fuse_qkv = !env_flag("MINFER_NO_FUSE_QKV");
    c.fuse_ffn = !env_flag("MINFER_NO_FUSE_FFN");
    return c;
}

}  // namespace minfer
