#!/usr/bin/python3
"""Reference dequantizations of the low-bit GGUF formats by gguf-py (llama.cpp's Python package), which
minfer's tests compare its own dequantizers with (tests/quants/test_quants_gguf_py.cpp).

For Q2_K, Q3_K, IQ4_NL and IQ4_XS: blocks read from files llama-quantize wrote (real ggml bytes), plus blocks
of random bytes with finite fp16 scales; for MXFP4 (llama-quantize writes it only for MoE experts): blocks
gguf-py's own MXFP4 quantizer made from the model's F16 weights, plus random blocks. Each block's floats are
gguf-py's dequantize, stored as float32 bit patterns.

    ../shared/tools/llamacpp llama-cli --version      # installs gguf-py under /tmp/llamacpp
    for t in Q2_K Q3_K_M IQ4_NL IQ4_XS; do
      ../shared/tools/llamacpp llama-quantize ../shared/models/qwen3-mini-F16.gguf /tmp/q/qwen3-mini-$t.gguf $t
    done
    PYTHONPATH=/tmp/llamacpp/root/usr/lib/python3/dist-packages scripts/make-quant-refs.py \\
        /tmp/q ../shared/models/qwen3-mini-F16.gguf tests/quants/data/lowbit-dequant.json
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

FILES = {T.Q2_K: "Q2_K", T.Q3_K: "Q3_K_M", T.IQ4_NL: "IQ4_NL", T.IQ4_XS: "IQ4_XS"}
# Byte offsets of each block's fp16 scales (d, and dmin where there is one): random blocks get finite ones.
FP16_AT = {T.Q2_K: [80, 82], T.Q3_K: [108], T.IQ4_NL: [0], T.IQ4_XS: [0], T.MXFP4: []}
N_FILE, N_RANDOM = 12, 12


def blocks_of(tensor, qtype, n):
    """n blocks from the start and the middle of a tensor's bytes."""
    _, size = GGML_QUANT_SIZES[qtype]
    raw = np.asarray(tensor.data).reshape(-1).view(np.uint8).reshape(-1, size)
    half = len(raw) // 2
    return np.concatenate([raw[: n // 2], raw[half : half + n - n // 2]])


def random_blocks(qtype, rng, n):
    _, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for at in FP16_AT[qtype]:
        scales = rng.uniform(-2.0, 2.0, size=n).astype(np.float16)
        raw[:, at : at + 2] = scales.view(np.uint8).reshape(n, 2)
    if qtype == T.MXFP4:
        raw[:, 0] = rng.integers(100, 150, size=n)  # exponents that keep every value finite and normal
    return raw


def first_tensor(reader, qtype):
    return next(t for t in reader.tensors if t.tensor_type == qtype)


def cases(qtype, blocks):
    block_size, _ = GGML_QUANT_SIZES[qtype]
    out = []
    for b in blocks:
        floats = dequantize(b.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert floats.size == block_size and np.all(np.isfinite(floats))
        out.append({"bytes": b.tobytes().hex(), "f32_bits": floats.view(np.uint32).tolist()})
    return out


def main():
    qdir, f16_path, out_path = sys.argv[1:4]
    rng = np.random.default_rng(55)
    refs = {}
    for qtype, suffix in FILES.items():
        reader = GGUFReader(f"{qdir}/qwen3-mini-{suffix}.gguf")
        blocks = np.concatenate(
            [blocks_of(first_tensor(reader, qtype), qtype, N_FILE), random_blocks(qtype, rng, N_RANDOM)])
        refs[qtype.name] = cases(qtype, blocks)
    weights = first_tensor(GGUFReader(f16_path), T.F16)
    rows = np.asarray(weights.data).astype(np.float32).reshape(-1, 32)[: N_FILE]
    mx = quantize(rows, T.MXFP4).reshape(N_FILE, -1)
    refs["MXFP4"] = cases(T.MXFP4, np.concatenate([mx, random_blocks(T.MXFP4, rng, N_RANDOM)]))
    with open(out_path, "w") as f:
        json.dump({"made_by": "scripts/make-quant-refs.py (gguf-py dequantize)", "types": refs}, f)


if __name__ == "__main__":
    main()
