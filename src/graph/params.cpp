#include "graph/params.h"

#include "util/env.h"

namespace minfer {

const char* graph_output_name(GraphOutput o) {
    switch (o) {
        case GraphOutput::Logits:
            return "logits";
        case GraphOutput::Argmax:
            return "argmax";
        case GraphOutput::Hidden:
            return "hidden";
    }
    return "?";
}

CParams CParams::from_env(int64_t n_ctx, bool gpu) {
    CParams c;
    c.n_ctx = n_ctx;
    c.gpu = gpu;
    c.fuse_qkv = !env_flag("MINFER_NO_FUSE_QKV");
    c.fuse_ffn = !env_flag("MINFER_NO_FUSE_FFN");
    return c;
}

}  // namespace minfer
