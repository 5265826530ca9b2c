"""The llama.cpp side of make-arch-mini.py and its quantized goldens: the stages carry-llamacpp (Debian's
llama-quantize for the GPU machine), quantize (llama-quantize into each of QUANT_TYPES), dequant-ref (float64
references on gguf-py-dequantized weights) and llamacpp (llama.cpp's greedy continuation of the reference prompts,
and with --teacher-forced its top-1 at QuantGolden's positions), with their helpers.

Imported by make-arch-mini.py, which holds the CLI and the recipe. Each stage takes the parsed arguments and m, the
make-arch-mini.py module: its ARCHS, SHARED, log and import_gguf, and for dequant-ref the build stage's
build_tokenizer, check_tokenizer, Float64Everywhere and float64_references. Importable without torch or
transformers (dequant-ref imports them when it runs).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

# llama-quantize's file types for the quantized goldens, each with the ggml type it must write for some tensor
# (the others keep llama.cpp's mix: the tied embedding as Q6_K or Q8_0, attn_v and ffn_down a step up, ...)
QUANT_TYPES = {"Q2_K": "Q2_K", "Q3_K_M": "Q3_K", "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS", "MXFP4_MOE": "MXFP4"}


# ----------------------------------------------------------------------------------------------------------------
# stage carry-llamacpp (here)
# ----------------------------------------------------------------------------------------------------------------

LLAMACPP_CARRY_LIBS = ("ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1",
                       "libgomp.so.1", "libllama.so.0", "libllama-common.so.0", "libggml.so.0", "libggml-base.so.0",
                       "libssl.so.3", "libcrypto.so.3", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                       "llama/libllama-quantize-impl.so")


def stage_carry_llamacpp(args, m):
    """Debian's llama-quantize with its own C library (as ../shared/tools/llamacpp installs it), copied into an
    ignored folder that can travel to the GPU machine (about 26 MB), with a wrapper DIR/llamacpp TOOL ARGS."""
    subprocess.run([str(m.SHARED / "tools/llamacpp"), "llama-cli", "--version"], capture_output=True)
    root = Path(os.environ.get("LLAMACPP_ROOT", "/tmp/llamacpp")) / "root"
    lib = root / "usr/lib/x86_64-linux-gnu"
    dest = Path(args.dir).resolve()
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lib").mkdir(parents=True)
    (dest / "bin").mkdir()
    (dest / "ggml/backends0").mkdir(parents=True)
    for f in LLAMACPP_CARRY_LIBS:
        shutil.copy2(lib / f, dest / "lib" / Path(f).name)          # follows the symlinks
    for f in ("libz.so.1", "libzstd.so.1"):                          # from this machine, in case they lack there
        shutil.copy2(Path("/lib/x86_64-linux-gnu") / f, dest / "lib" / f)
    shutil.copy2(root / "usr/bin/llama-quantize", dest / "bin")
    shutil.copy2(lib / "ggml/backends0/libggml-cpu-x64.so", dest / "ggml/backends0")
    w = dest / "llamacpp"
    w.write_text("""#!/bin/bash
# Debian's llama-quantize with its own C library, carried to the GPU machine: a subset of what
# ../shared/tools/llamacpp installs (one CPU backend, the generic x64 one). Usage: llamacpp TOOL ARGS...
set -euo pipefail
R=$(cd "$(dirname "$0")" && pwd)
[ -e /usr/lib/x86_64-linux-gnu/ggml ] || ln -s "$R/ggml" /usr/lib/x86_64-linux-gnu/ggml
tool=$1; shift
exec "$R/lib/ld-linux-x86-64.so.2" --library-path "$R/lib" "$R/bin/$tool" "$@"
""")
    w.chmod(0o755)
    m.log(f"llama-quantize carried in {dest}")


# ----------------------------------------------------------------------------------------------------------------
# stage quantize (here)
# ----------------------------------------------------------------------------------------------------------------

def tensor_types(gguf, path: Path):
    """{ggml type name: number of tensors} of a GGUF file."""
    hist: dict[str, int] = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        hist[t.tensor_type.name] = hist.get(t.tensor_type.name, 0) + 1
    return dict(sorted(hist.items()))


def stage_quantize(args, m):
    """llama-quantize (Debian's build, no importance matrix) of the F16 file into each type, checking that the
    file really holds tensors of the type named."""
    spec = m.ARCHS[args.arch]
    gguf = m.import_gguf(Path(args.work).resolve() if args.work else None)
    tool = args.tool
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for ftype in args.types:
        dst = outdir / f"{spec['name']}-{ftype}.gguf"
        r = subprocess.run([tool, "llama-quantize", args.f16, str(dst), ftype, str(args.threads)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not dst.exists():
            m.log((r.stdout + r.stderr)[-3000:])
            raise SystemExit(f"llama-quantize {ftype} failed rc={r.returncode}")
        hist = tensor_types(gguf, dst)
        if QUANT_TYPES[ftype] not in hist:
            raise SystemExit(f"{dst.name} holds no {QUANT_TYPES[ftype]} tensor: {hist}")
        m.log(f"{dst.name}: {dst.stat().st_size} bytes, tensor types {hist}")


# ----------------------------------------------------------------------------------------------------------------
# stage dequant-ref (GPU)
# ----------------------------------------------------------------------------------------------------------------

def dequantized_state(gguf, spec, cfg, model, path: Path):
    """Every parameter of the HF model from the GGUF file, dequantized by gguf-py (gguf.quants.dequantize, the
    reference dequantization). The names go through the converter's own map (gguf.get_tensor_name_map), read
    backwards; the experts, which the converter stacks into [n_expert, ...] tensors (ffn_gate_exps,
    ffn_up_exps, ffn_down_exps), are taken apart again: per expert, or as transformers' fused gate_up_proj
    ([n_expert, 2 * n_ff, n_embd], gate rows first, which the converter splits the same way)."""
    import re
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    tmap = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, spec["gguf_arch"]), cfg.num_hidden_layers)
    used: set[str] = set()
    cache: dict[str, np.ndarray] = {}

    def tensor(hf_name):
        g = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if g is None or g not in tensors:
            raise SystemExit(f"{path.name}: no GGUF tensor for {hf_name} (mapped to {g})")
        if g not in cache:
            t = tensors[g]
            cache[g] = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)  # a copy
            used.add(g)
        return cache[g]

    state = {}
    for name, p in model.named_parameters():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            x = np.concatenate([tensor(base + "gate_proj.weight"), tensor(base + "up_proj.weight")], axis=1)
        elif name.endswith("mlp.experts.down_proj"):
            x = tensor(name + ".weight")
        elif m := re.fullmatch(r"(.*mlp\.experts)\.(\d+)\.(\w+_proj)\.weight", name):
            x = tensor(f"{m[1]}.{m[3]}.weight")[int(m[2])]
        elif name == "lm_head.weight" and cfg.tie_word_embeddings and "output.weight" not in tensors:
            x = tensor("model.embed_tokens.weight")   # tied, should transformers list it apart
        else:
            x = tensor(name)
        if tuple(x.shape) != tuple(p.shape):
            raise SystemExit(f"{path.name}: {name} is {tuple(p.shape)} in HF, {tuple(x.shape)} from the GGUF")
        state[name] = x
    if set(tensors) - used:
        raise SystemExit(f"{path.name}: tensors the HF model does not take: {sorted(set(tensors) - used)}")
    types = {tensors[g].tensor_type.name for g in used}
    return state, types


def stage_dequant_ref(args, m):
    """The float64 reference of each quantized GGUF: its tensors dequantized by gguf-py into the HF model (in
    float32, which holds every dequantized value exactly), saved, and referenced as the build stage references
    the trained weights (float64_references inside Float64Everywhere, the same prompts and 48 greedy tokens).
    Run on the F16 file, it must give the build's reference exactly (a check of the name map)."""
    import torch
    import transformers

    spec = m.ARCHS[args.arch]
    work = Path(args.work).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gguf = m.import_gguf(work)
    m.log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}")
    vocab = json.loads((work / "vocab.json").read_text())
    prompts = json.loads((work / "prompts.json").read_text())
    tokref = json.loads((work / "tokref.json").read_text())
    cfg = spec["make_config"](transformers, vocab)
    cls = getattr(transformers, spec["hf_class"])
    for gg in map(Path, args.gguf):
        name = gg.name[: -len(".gguf")]
        hf_dir = out / f"hf-{name}"
        hf_dir.mkdir(exist_ok=True)
        hf_tok = m.build_tokenizer(spec, vocab, hf_dir)
        if m.check_tokenizer(hf_tok, tokref, prompts):
            raise SystemExit("tokenizer does not match the references")
        model = cls(cfg)
        state, types = dequantized_state(gguf, spec, cfg, model, gg)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(torch.from_numpy(state[n]))
                assert torch.equal(p.data, torch.from_numpy(state[n])), n
        if spec.get("moe"):
            model.config.output_router_logits = False
        model.to(torch.float32).save_pretrained(str(hf_dir))
        del model, state
        m.log(f"{gg.name}: dequantized ({', '.join(sorted(types))}) into {hf_dir}")
        with m.Float64Everywhere(torch):
            doc, _ = m.float64_references(torch, transformers, spec, cfg, hf_dir, prompts, args, "cuda", True)
        for e in doc["prompts"]:
            e.pop("full_logits_offset_floats", None)
            e.pop("full_logits_shape", None)
        doc = dict(model=name,
                   dtype_of_reference="float64 throughout on gguf-py-dequantized weights (HF transformers, "
                                      "eager attention)",
                   prompts=doc["prompts"])
        (out / f"{name}.ref.json").write_text(json.dumps(doc, ensure_ascii=False))
        shutil.rmtree(hf_dir)
        torch.cuda.empty_cache()
    m.log("dequant-ref done")


# ----------------------------------------------------------------------------------------------------------------
# stage llamacpp (here)
# ----------------------------------------------------------------------------------------------------------------

class LlamaServer:
    """Debian's llama-server on one GGUF (CPU), for the length of a with block; post() sends /completion."""

    def __init__(self, tool, gguf_path, port, threads):
        self.tool, self.path, self.port, self.threads = tool, str(gguf_path), port, threads

    def __enter__(self):
        import urllib.request
        self.srv = subprocess.Popen([self.tool, "llama-server", "-m", self.path, "--port", str(self.port), "-c", "512",
                                     "-np", "1", "-t", str(self.threads)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(120):
            try:
                if b"ok" in urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).read():
                    break
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
        return self

    def post(self, **body):
        import urllib.request
        rq = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=json.dumps(body).encode(),
                                    headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(rq, timeout=300).read())

    def __exit__(self, *exc):
        self.srv.terminate()
        self.srv.wait(timeout=30)
        return False


def teacher_forced_targets(p):
    """The positions QuantGolden (tests/engine/test_golden.cpp) judges for one reference prompt: the prompt, then
    the reference's greedy continuation but its last token; at each, the reference's top-1 next token."""
    seq = p["ids"] + p["greedy_ids"][:-1]
    want = [top[0] for top in p["top10_ids"]] + [s["ids"][0] for s in p["greedy_top5"][1:]]
    assert len(seq) == len(want)
    return seq, want


TEACHER_FORCED_METHOD = ("llama-server /completion, one request per position: prompt = the token ids up to and "
                         "including that position, n_predict 1, temperature 0 and top_k 1 (the argmax of the "
                         "logits), cache_prompt false (the whole prefix evaluated as one batch, as a teacher-forced "
                         "pass does); agreement = the reference's top-1 at that position")


def stage_llamacpp(args, m):
    spec = m.ARCHS[args.arch]
    ref = json.loads(Path(args.ref).read_text())
    tool = str(m.SHARED / "tools/llamacpp")
    ver = subprocess.run([tool, "llama-cli", "--version"], capture_output=True, text=True)
    vline = next((l for l in (ver.stdout + ver.stderr).splitlines() if l.startswith("version:")), "version: ?")
    engine = f"llama.cpp (Debian build {vline.split()[1]}, CPU)"
    eog = set(args.eog)
    for gg in args.gguf:
        gg = Path(gg)
        with LlamaServer(tool, gg, args.port, args.threads) as srv:
            prompts = []
            for p in ref["prompts"]:
                d = srv.post(prompt=p["ids"], n_predict=len(p["greedy_ids"]), temperature=0, n_probs=5,
                             return_tokens=True, cache_prompt=False)
                toks = d["tokens"]
                upto = toks[:-1] if toks and (d.get("stop_type") == "eos" or toks[-1] in eog) else toks
                agree = 0
                for a, b in zip(upto, p["greedy_ids"]):
                    if a != b:
                        break
                    agree += 1
                top5 = d["completion_probabilities"][0]["top_logprobs"] if d.get("completion_probabilities") else []
                prompts.append(dict(text=p["text"], ids=p["ids"], llamacpp_greedy_ids=toks, llamacpp_first_top5=top5,
                                    agree_with_float64_reference=agree, of=len(upto)))
            tf_agree = tf_of = 0
            if args.teacher_forced:
                for p, q in zip(ref["prompts"], prompts):
                    seq, want = teacher_forced_targets(p)
                    got = [srv.post(prompt=seq[: t + 1], n_predict=1, temperature=0, top_k=1, return_tokens=True,
                                    cache_prompt=False)["tokens"][0] for t in range(len(seq))]
                    miss = [t for t in range(len(seq)) if got[t] != want[t]]
                    q.update(teacher_forced_agree=len(seq) - len(miss), teacher_forced_of=len(seq),
                             teacher_forced_misses=[dict(position=t, llamacpp=got[t], reference=want[t]) for t in miss])
                    tf_agree += len(seq) - len(miss)
                    tf_of += len(seq)
        doc = {"model": gg.name, "engine": engine, "sampling": "greedy, stops at end-of-generation",
               "prompts": prompts}
        if args.teacher_forced:
            gguf = m.import_gguf(None)
            doc = {"model": gg.name, "engine": engine, "tensor_types": tensor_types(gguf, gg),
                   "teacher_forced_agreement": round(tf_agree / tf_of, 4), "teacher_forced_agree": tf_agree,
                   "teacher_forced_of": tf_of, "teacher_forced_method": TEACHER_FORCED_METHOD,
                   "sampling": doc["sampling"], "prompts": prompts}
        name = gg.name[:-len(".gguf")]
        dst = Path(args.outdir) / f"{name}.llamacpp.json"
        dst.write_text(json.dumps(doc, ensure_ascii=False, indent=0))
        m.log(f"{gg.name}: " + ", ".join(f"{q['agree_with_float64_reference']}/{q['of']}" for q in prompts)
              + (f"; teacher-forced top-1 {tf_agree}/{tf_of}" if args.teacher_forced else "") + f"  -> {dst}")
