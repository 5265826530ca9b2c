// Boolean switches read from the environment (MINFER_NO_FUSE_QKV=1, MINFER_NO_CUDA_GRAPH=1, ...).
#pragma once

namespace minfer {

// True when `name` is set to something other than "" or "0".
bool env_flag(const char* name);

}  // namespace minfer
