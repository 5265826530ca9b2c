#!/usr/bin/env python3
"""Make a tiny trained model of one architecture, its GGUF files and float64 golden references.

    make-arch-mini.py ARCH STAGE [options]

ARCH picks an entry of ARCHS below (qwen3moe, gemma3; gpt-oss goes in as a further entry).
The stages run on different machines:

  fetch-converter DIR   (here)  llama.cpp's own converter (convert_hf_to_gguf.py + conversion/ + gguf-py/), the
                                same pinned source as ../shared/tools/llamacpp-src, which strips those parts.
  prep                  (here)  vocabulary of the source GGUF -> WORK/vocab.json, training text -> WORK/corpus.json,
                                prompts and tokenizer references -> WORK/, converter -> WORK/conv/.
  build                 (GPU)   HF tokenizer (tokenizers library) + checks against tokenizer.ref.json; the model;
                                a converter dry run; training (bf16 autocast); rounding of every weight to a value
                                exact in both F16 and BF16; HF folder; float64 references; GGUF F16 + BF16 by
                                llama.cpp's converter.  Writes into --out.
  llamacpp              (here)  llama.cpp (Debian build, CPU, ../shared/tools/llamacpp) greedy continuation of the
                                reference prompts on each GGUF given -> NAME.llamacpp.json with agreement counts;
                                with --teacher-forced also its teacher-forced top-1 agreement (QuantGolden's).
  carry-llamacpp DIR    (here)  Debian's llama-quantize with its libraries, into an ignored folder to carry.
  quantize              (here or GPU)  llama-quantize of the F16 file into each of QUANT_TYPES, checking that each
                                file holds tensors of its type (ARCH qwen3moe256).
  dequant-ref           (GPU)   float64 references on each quantized file's weights, dequantized by gguf-py and
                                put back into the HF model -> NAME-TYPE.ref.json.

The stages carry-llamacpp, quantize, dequant-ref and llamacpp live in arch_mini_quant.py beside this script.
The reference JSON mirrors ../shared/refs/qwen3-mini.ref.json field for field.

Status (2026-12-07): both entries built on an H100 (tests/data/minis/ holds their F16 files and references;
minfer gives every float64 greedy token of the six prompts on both). The reference is made inside
Float64Everywhere, since HF computes RMSNorm, RoPE and the softmaxes in float32 even after model.double().

Recipe (build-mini-carry/ is ignored by .gitignore's /build*/; prep's output serves every ARCH, since they share
the mini Qwen vocabulary):
  python3 scripts/make-arch-mini.py qwen3moe fetch-converter /tmp/conv-src
  /usr/bin/python3 scripts/make-arch-mini.py gemma3 prep --work build-mini-carry/work --converter /tmp/conv-src
     (gguf-py: /tmp/llamacpp/root/... after `../shared/tools/llamacpp llama-cli --version`; numpy: apt python3-numpy)
  GPU (device run, carry build-mini-carry/; both builds side by side on the one GPU, about 5 minutes):
     for a in qwen3moe gemma3; do python3 scripts/make-arch-mini.py $a build --work build-mini-carry/work \
       --out /tmp/o-$a --train-seconds 150 > $OUT/build-$a.log 2>&1 & done; wait; then copy /tmp/o-*/ *.ref.json,
       *.logits.f32 and *.gguf to $OUT.
  here:
  python3 scripts/make-arch-mini.py qwen3moe llamacpp --ref qwen3moe-mini.ref.json --outdir DIR qwen3moe-mini-F16.gguf ...
  (the llamacpp stage reproduces ../shared/refs/qwen3-mini-Q8_0.llamacpp.json's greedy ids and agreement counts from
  qwen3-mini.ref.json, not its first-token top-5 log-probabilities: those follow the CPU backend llama.cpp picks for
  the host, and on this one they differ from the file's by up to 0.05, with near ties in another order)

The quantized minis (ARCH qwen3moe256: every matrix 256 wide, so that the K-quants and IQ4_XS cover every matrix):
  the build as above; llama-quantize in the same run from a carried copy of Debian's (`make-arch-mini.py
  qwen3moe256 carry-llamacpp build-mini-carry/llamacpp`), whose files are byte for byte what
  ../shared/tools/llamacpp writes here:
     python3 scripts/make-arch-mini.py qwen3moe256 quantize --f16 /tmp/o/qwen3moe256-mini-F16.gguf --outdir /tmp/q \
       --work build-mini-carry/work --tool build-mini-carry/llamacpp/llamacpp --threads 8
     python3 scripts/make-arch-mini.py qwen3moe256 dequant-ref --work build-mini-carry/work --out /tmp/r \
       /tmp/o/qwen3moe256-mini-F16.gguf /tmp/q/*.gguf        (the F16 file's must equal the build's reference)
  here, for each TYPE:
     python3 scripts/make-arch-mini.py qwen3moe256 llamacpp --teacher-forced --ref qwen3moe256-mini-TYPE.ref.json \
       --outdir tests/data/minis tests/data/minis/qwen3moe256-mini-TYPE.gguf
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MINFER_SHARED", REPO.parent / "shared"))

# the quantized goldens' and llama.cpp's stages, beside this script whatever the working directory; no
# scripts/__pycache__ left in the working tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.dont_write_bytecode = True
import arch_mini_quant as quant  # noqa: E402


# ----------------------------------------------------------------------------------------------------------------
# Architecture entries.  Each says where its vocabulary comes from, which prompts its references use, how its HF
# config is made and what the converter needs.  Add gemma3 / gpt-oss as further entries.
# ----------------------------------------------------------------------------------------------------------------

def qwen3moe_config(transformers, vocab, **over):
    # Small enough for the repository (about 4.5 MB in F16): head_dim is set apart from hidden_size / n_head
    # so that the attention kernels see the 64-wide heads of the real models. `over` replaces entries (the
    # 256-wide variant below).
    kw = dict(
        vocab_size=vocab["n_rows"],
        hidden_size=128,
        intermediate_size=128,          # dense-MLP width; unused (every layer is MoE), written as feed_forward_length
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=4096,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        use_sliding_window=False,
        decoder_sparse_step=1,
        moe_intermediate_size=64,
        num_experts_per_tok=2,
        num_experts=8,
        norm_topk_prob=True,
        output_router_logits=False,
        router_aux_loss_coef=0.01,
        mlp_only_layers=[],
        bos_token_id=vocab["bos_token_id"],
        eos_token_id=vocab["eos_token_id"],
        pad_token_id=vocab["padding_token_id"],
    )
    kw.update(over)
    try:
        cfg = transformers.Qwen3MoeConfig(rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **kw)
    except TypeError:
        cfg = transformers.Qwen3MoeConfig(rope_theta=1e6, **kw)
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(cfg, "rope_theta", None))
    assert theta == 1e6, f"rope theta is {theta}"
    assert cfg.head_dim == 64
    return cfg


def qwen3moe256_config(transformers, vocab):
    # The quantized goldens' model: every matrix's rows 256 wide (hidden 256, 4 heads x 64 = 256 into
    # attn_output, experts 256 wide), so that the K-quants and IQ4_XS (blocks of 256) quantize every matrix
    # and llama-quantize falls back for none. Two layers keep the F16 file near 11 MB (the 8320 x 256
    # embedding alone is 4.3 MB); 8 experts, 2 per token, as qwen3moe-mini.
    return qwen3moe_config(transformers, vocab, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                           moe_intermediate_size=256)


GEMMA3_LAYERS = 6   # llama.cpp's gemma3 fixes the pattern at 6: layers 0-4 sliding, layer 5 global


def gemma3_config(transformers, vocab):
    # The vocabulary is the mini Qwen BPE; the converter cuts token_embd to the tokenizer's own entries
    # (8192 + 26 added), so the model's vocabulary is exactly that many rows. A window of 16 positions
    # is shorter than every prompt plus its continuation; the global layer's RoPE is linearly scaled (x2)
    # as the 4B-27B models are, the local layers' is not.
    n_vocab = vocab["n_bpe"] + len(vocab["added"])
    assert max(a["id"] for a in vocab["added"]) == n_vocab - 1
    layer_types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(GEMMA3_LAYERS)]
    kw = dict(
        vocab_size=n_vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=GEMMA3_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=4096,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        query_pre_attn_scalar=64,
        sliding_window=16,
        layer_types=layer_types,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        bos_token_id=vocab["bos_token_id"],
        eos_token_id=vocab["eos_token_id"],
        pad_token_id=vocab["padding_token_id"],
    )
    rope_full = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}
    rope_local = {"rope_type": "default", "rope_theta": 1e4}
    try:
        cfg = transformers.Gemma3TextConfig(
            rope_parameters={"full_attention": rope_full, "sliding_attention": rope_local}, **kw)
    except TypeError:
        cfg = transformers.Gemma3TextConfig(rope_theta=1e6, rope_local_base_freq=1e4,
                                            rope_scaling={"rope_type": "linear", "factor": 2.0}, **kw)
    assert list(cfg.layer_types) == layer_types, cfg.layer_types
    assert cfg.sliding_window == 16 and cfg.head_dim == 64 and cfg.query_pre_attn_scalar == 64
    log(f"gemma3 rope: {getattr(cfg, 'rope_parameters', None) or (cfg.rope_theta, cfg.rope_scaling)}")
    return cfg


def gptoss_config(transformers, vocab):
    # gpt-oss's layout at mini size: alternating sliding (window 16) and full layers from layer 0, a sink per
    # head, biased attention and experts, the clamped SwiGLU (limit 7), YaRN x32 over an original 4096
    # positions with its correction range not rounded (truncate false, as the released config says).
    layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(4)]
    kw = dict(
        vocab_size=vocab["n_rows"],
        hidden_size=128,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=16,
        layer_types=layer_types,
        max_position_embeddings=131072,
        initializer_range=0.02,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        attention_bias=True,
        swiglu_limit=7.0,
        output_router_logits=False,
        router_aux_loss_coef=0.01,
        bos_token_id=vocab["bos_token_id"],
        eos_token_id=vocab["eos_token_id"],
        pad_token_id=vocab["padding_token_id"],
    )
    yarn = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "original_max_position_embeddings": 4096, "truncate": False}
    try:
        cfg = transformers.GptOssConfig(rope_parameters=dict(yarn, rope_theta=150000.0), **kw)
    except TypeError:
        cfg = transformers.GptOssConfig(rope_theta=150000.0, rope_scaling=yarn, **kw)
    assert list(cfg.layer_types) == layer_types, cfg.layer_types
    assert cfg.sliding_window == 16 and cfg.head_dim == 64
    log(f"gpt-oss rope: {getattr(cfg, 'rope_parameters', None) or (cfg.rope_theta, cfg.rope_scaling)}")
    return cfg


# The mini Qwen BPE (8192 ranks + 26 specials, 8320 rows), its prompts and tokenizer references: every mini
# here reuses them, so their references and llama.cpp's runs tokenize alike.
QWEN_MINI_VOCAB = dict(
    vocab_gguf="models/qwen3-mini-F16.gguf",
    gguf_pre="qwen2",                            # tokenizer.ggml.pre the converter must write
    prompts_ref="refs/qwen3-mini.ref.json",      # prompts (text + expected ids) reused
    tokenizer_ref="qwen-mini",                   # entry of refs/tokenizer.ref.json that must match
    chat_template_ref="qwen3-chat-template",
    # Qwen2's pre-tokenizer regex (split digits one by one), as in Qwen's tokenizer.json
    split_regex=r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    normalizer="NFC",
)

ARCHS = {
    "qwen3moe": dict(name="qwen3moe-mini", hf_class="Qwen3MoeForCausalLM", make_config=qwen3moe_config, moe=True,
                     **QWEN_MINI_VOCAB),
    # norm_shift: Gemma's RMSNorm multiplies by (1 + w) and the converter writes 1 + w
    "gemma3": dict(name="gemma3-mini", hf_class="Gemma3ForCausalLM", make_config=gemma3_config, norm_shift=True,
                   **QWEN_MINI_VOCAB),
    "gpt-oss": dict(name="gptoss-mini", hf_class="GptOssForCausalLM", make_config=gptoss_config, moe=True,
                    **QWEN_MINI_VOCAB),
    # quantized (stage quantize) into each type of quant.QUANT_TYPES, with float64 references on the dequantized
    # weights (stage dequant-ref); gguf_arch names the converter's tensor-name map that dequant-ref reads back
    "qwen3moe256": dict(name="qwen3moe256-mini", hf_class="Qwen3MoeForCausalLM", make_config=qwen3moe256_config,
                        moe=True, gguf_arch="QWEN3MOE", **QWEN_MINI_VOCAB),
}

LLAMACPP_NPM_VERSION = "3.21.1"   # node-llama-cpp release whose bundled llama.cpp ../shared/tools/llamacpp-src pins


# ----------------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------------

def log(*a):
    print(*a, flush=True)


def import_gguf(work: Path | None):
    cands = []
    if work is not None:
        cands.append(work / "conv" / "gguf-py")
    cands.append(Path("/tmp/llamacpp/root/usr/lib/python3/dist-packages"))
    for c in cands:
        if c.is_dir() and str(c) not in sys.path:
            sys.path.insert(0, str(c))
    import gguf  # noqa: E402
    return gguf


# ----------------------------------------------------------------------------------------------------------------
# stage fetch-converter (here)
# ----------------------------------------------------------------------------------------------------------------

def stage_fetch_converter(args):
    dest = Path(args.dir).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(subprocess.check_output(["mktemp", "-d"], text=True).strip())
    try:
        subprocess.check_call(f"npm pack --silent node-llama-cpp@{LLAMACPP_NPM_VERSION} >/dev/null && "
                              f"tar xzf node-llama-cpp-*.tgz && git clone -q package/llama/gitRelease.bundle llama.cpp",
                              shell=True, cwd=tmp)
        src = tmp / "llama.cpp"
        commit = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=src, text=True).strip()
        for p in ("convert_hf_to_gguf.py", "conversion", "gguf-py", "LICENSE"):
            d = dest / p
            if d.is_dir():
                shutil.rmtree(d)
            (shutil.copytree if (src / p).is_dir() else shutil.copy2)(src / p, d)
        (dest / "COMMIT").write_text(f"node-llama-cpp@{LLAMACPP_NPM_VERSION} llama.cpp {commit}\n")
        log(f"converter of llama.cpp {commit} in {dest}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------------
# stage prep (here)
# ----------------------------------------------------------------------------------------------------------------

def corpus_files():
    """English first (weighted x3 in training), then code."""
    eng = [REPO / "README.md"] + sorted(REPO.glob("bench/*.md")) + sorted(SHARED.glob("design/*.md")) \
        + sorted(SHARED.glob("design/*.txt"))
    code = []
    for pat in ("src/**/*.h", "src/**/*.cpp", "src/**/*.cu", "src/**/*.cuh", "app/**/*.cpp", "app/**/*.h",
                "bench/*.cpp", "bench/*.h", "bench/*.sh", "scripts/*.py", "scripts/*.sh", "tests/**/*.cpp",
                "tests/**/*.h"):
        code += sorted(REPO.glob(pat))
    return [p for p in eng if p.is_file()], [p for p in code if p.is_file() and p.stat().st_size < 200_000]


def stage_prep(args):
    spec = ARCHS[args.arch]
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.converter:
        conv = work / "conv"
        if conv.exists():
            shutil.rmtree(conv)
        shutil.copytree(Path(args.converter), conv)
    gguf = import_gguf(work)

    r = gguf.GGUFReader(str(SHARED / spec["vocab_gguf"]))
    f = r.fields

    def val(k):
        return f[k].contents() if k in f else None

    tokens = val("tokenizer.ggml.tokens")
    types = [int(t) for t in val("tokenizer.ggml.token_type")]
    merges = val("tokenizer.ggml.merges")
    assert val("tokenizer.ggml.model") == "gpt2" and val("tokenizer.ggml.pre") == spec["gguf_pre"]
    n_bpe = 1 + max(i for i, t in enumerate(types) if t == 1)          # NORMAL tokens: 0 .. n_bpe-1
    assert all(t == 1 for t in types[:n_bpe]) and len(merges) == n_bpe - 256
    added = [(i, tokens[i], types[i] == 3) for i in range(n_bpe, len(tokens)) if types[i] in (3, 4)]
    vocab = dict(
        source=spec["vocab_gguf"],
        n_rows=len(tokens), n_bpe=n_bpe, tokens=tokens[:n_bpe], merges=merges,
        added=[dict(id=i, content=c, special=s) for i, c, s in added],
        chat_template=val("tokenizer.chat_template"),
        bos_token_id=int(val("tokenizer.ggml.bos_token_id")), eos_token_id=int(val("tokenizer.ggml.eos_token_id")),
        padding_token_id=int(val("tokenizer.ggml.padding_token_id")),
        add_bos_token=bool(val("tokenizer.ggml.add_bos_token")),
    )
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    log(f"vocab: {n_bpe} BPE tokens, {len(merges)} merges, {len(added)} added, {len(tokens)} rows")

    eng, code = corpus_files()
    docs = dict(english=[p.read_text(errors="replace") for p in eng], code=[p.read_text(errors="replace") for p in code])
    (work / "corpus.json").write_text(json.dumps(docs, ensure_ascii=False))
    log(f"corpus: {len(eng)} English files ({sum(map(len, docs['english']))} chars), "
        f"{len(code)} code files ({sum(map(len, docs['code']))} chars)")

    pref = json.loads((SHARED / spec["prompts_ref"]).read_text())
    prompts = [dict(text=p["text"], ids=p["ids"]) for p in pref["prompts"]]
    (work / "prompts.json").write_text(json.dumps(prompts, ensure_ascii=False))
    tref = json.loads((SHARED / "refs/tokenizer.ref.json").read_text())
    (work / "tokref.json").write_text(json.dumps(dict(strings=tref[spec["tokenizer_ref"]],
                                                      chat=tref.get(spec["chat_template_ref"])), ensure_ascii=False))
    log(f"prompts: {len(prompts)}; work folder {work}")


# ----------------------------------------------------------------------------------------------------------------
# stage build (GPU)
# ----------------------------------------------------------------------------------------------------------------

def build_tokenizer(spec, vocab, hf_dir: Path):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    import transformers

    v = {t: i for i, t in enumerate(vocab["tokens"])}
    merges = [tuple(m.split(" ")) for m in vocab["merges"]]
    assert all(len(m) == 2 for m in merges)
    bpe = models.BPE(vocab=v, merges=merges, dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = getattr(normalizers, spec["normalizer"])()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(spec["split_regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    for a in vocab["added"]:
        at = AddedToken(a["content"], special=a["special"], normalized=False, single_word=False,
                        lstrip=False, rstrip=False)
        (tok.add_special_tokens if a["special"] else tok.add_tokens)([at])
        assert tok.token_to_id(a["content"]) == a["id"], (a, tok.token_to_id(a["content"]))

    def name(i):
        return None if i is None else tok.id_to_token(i)

    fast_cls = getattr(transformers, "PreTrainedTokenizerFast", None) or getattr(transformers, "TokenizersBackend")
    fast = fast_cls(
        tokenizer_object=tok, bos_token=None, eos_token=name(vocab["eos_token_id"]),
        pad_token=name(vocab["padding_token_id"]), unk_token=None, clean_up_tokenization_spaces=False,
        model_max_length=4096, chat_template=vocab["chat_template"])
    fast.save_pretrained(str(hf_dir))
    # what Qwen's tokenizer_config.json says besides, so that the converter writes the same GGUF keys
    tc_path = hf_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc.update(add_bos_token=vocab["add_bos_token"], add_prefix_space=False, errors="replace",
              chat_template=vocab["chat_template"])
    tc_path.write_text(json.dumps(tc, ensure_ascii=False, indent=2))
    return transformers.AutoTokenizer.from_pretrained(str(hf_dir))


def check_tokenizer(hf_tok, tokref, prompts):
    bad = 0
    for e in tokref["strings"]:
        ids = hf_tok.encode(e["text"], add_special_tokens=False)
        dec = hf_tok.decode(e["ids"], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if ids != e["ids"] or dec != e["decoded"]:
            bad += 1
            log(f"TOKENIZER MISMATCH {e['text']!r}: {ids} vs {e['ids']}; decoded {dec!r} vs {e['decoded']!r}")
    log(f"tokenizer: {len(tokref['strings']) - bad}/{len(tokref['strings'])} reference strings match")
    for p in prompts:
        ids = hf_tok.encode(p["text"], add_special_tokens=False)
        if ids != p["ids"]:
            bad += 1
            log(f"PROMPT MISMATCH {p['text']!r}: {ids} vs {p['ids']}")
    chat = tokref.get("chat")
    if chat:
        got = hf_tok.apply_chat_template(chat["messages"], tokenize=False, add_generation_prompt=True)
        log("chat template: " + ("matches" if got == chat["rendered_with_generation_prompt"]
                                 else f"DIFFERS (not fatal): {got!r}"))
    return bad


def round_f16_bf16(torch, model, norm_shift=False):
    """Every weight to a value exact in both F16 and BF16: BF16 rounding, then |x| < 2^-14 (F16 subnormal) -> 0.
    With norm_shift (Gemma), a norm weight w is stored as 1 + w, so 1 + w is what gets rounded: both w and 1 + w
    are then exact, and the converter's 1 + w (computed in BF16 from the saved weights) is the value HF uses."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            shifted = norm_shift and n.endswith("norm.weight")
            x = p.data.float()
            if shifted:
                x = (1.0 + x).to(torch.bfloat16).float() - 1.0
            else:
                x = x.to(torch.bfloat16).float()
                x[x.abs() < 2.0 ** -14] = 0.0
            assert x.abs().max().item() <= 65504.0, n
            for y in ((x, x + 1.0) if shifted else (x,)):
                assert torch.equal(y.half().float(), y) and torch.equal(y.bfloat16().float(), y), n
            p.data.copy_(x)


class Float64Everywhere:
    """HF keeps islands of float32 even in a float64 model: RMSNorm and RoPE call .float(), the eager attention and
    the MoE router ask softmax for dtype=float32, and RoPE's inverse frequencies are built with .float() at
    construction. Inside this context every such request gives float64 instead, so that the reference is float64
    throughout. Load and run the reference model inside it."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        torch = self.torch
        T, F = torch.Tensor, torch.nn.functional
        self.saved = (T.float, T.to, T.softmax, F.softmax, torch.softmax)
        narrow = (torch.float32, torch.float16, torch.bfloat16)
        to0, tsm0, fsm0 = T.to, T.softmax, F.softmax

        def to(self_, *a, **k):
            if k.get("dtype") in narrow:
                k["dtype"] = torch.float64
            a = tuple(torch.float64 if isinstance(x, torch.dtype) and x in narrow else x for x in a)
            return to0(self_, *a, **k)

        def fsm(x, dim=None, _stacklevel=3, dtype=None):
            return fsm0(x, dim=dim, dtype=torch.float64 if dtype in narrow else dtype)

        def tsm(x, dim, dtype=None):
            return tsm0(x, dim, dtype=torch.float64 if dtype in narrow else dtype)

        T.float, T.to, T.softmax, F.softmax, torch.softmax = T.double, to, tsm, fsm, fsm
        return self

    def __exit__(self, *exc):
        torch = self.torch
        (torch.Tensor.float, torch.Tensor.to, torch.Tensor.softmax, torch.nn.functional.softmax,
         torch.softmax) = self.saved
        return False


def set_eager_experts(model):
    ok = False
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
            ok = True
        except Exception as e:  # noqa: BLE001
            log(f"set_experts_implementation failed: {e}")
    if not ok:
        try:
            model.config._experts_implementation = "eager"
        except Exception as e:  # noqa: BLE001
            log(f"cannot set _experts_implementation: {e}")
    return getattr(model.config, "_experts_implementation", None)


def run_converter(work: Path, spec, hf_dir: Path, outtype: str, outfile: Path):
    """llama.cpp's convert_hf_to_gguf.py, with tokenizer.ggml.pre forced: the mini BPE's fingerprint (a hash of how
    it splits a test string) is unknown to the converter, though its pre-tokenizer is exactly Qwen's."""
    conv = work / "conv"
    code = f"""
import sys, runpy
sys.path.insert(0, {str(conv)!r}); sys.path.insert(1, {str(conv / 'gguf-py')!r})
import conversion.base as cb
for c in list(vars(cb).values()):
    if isinstance(c, type) and 'get_vocab_base_pre' in vars(c):
        c.get_vocab_base_pre = lambda self, tokenizer: {spec['gguf_pre']!r}
sys.argv = ['convert_hf_to_gguf.py', {str(hf_dir)!r}, '--outtype', {outtype!r}, '--outfile', {str(outfile)!r},
            '--model-name', {spec['name']!r}]
runpy.run_path({str(conv / 'convert_hf_to_gguf.py')!r}, run_name='__main__')
"""
    t = time.time()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    tail = (r.stdout + r.stderr)[-3000:]
    if r.returncode != 0 or not outfile.exists():
        log(tail)
        raise SystemExit(f"converter failed ({outtype}) rc={r.returncode}")
    log(f"converter {outtype}: {outfile.name} {outfile.stat().st_size} bytes in {time.time() - t:.1f}s")
    return tail


def float64_references(torch, transformers, spec, cfg, hf_dir: Path, prompts, args, dev, everywhere):
    """Logits (top 10 per position; all of them for the first two prompts) and 48 greedy tokens with their top 5,
    from the saved weights in float64. Returns the reference document (without train) and the full logits."""
    import numpy as np
    cls = getattr(transformers, spec["hf_class"])
    moe = spec.get("moe", False)
    kw = dict(dtype=torch.float64, attn_implementation="eager")
    if moe:
        try:
            ref = cls.from_pretrained(str(hf_dir), experts_implementation="eager", **kw)
        except TypeError:
            ref = cls.from_pretrained(str(hf_dir), **kw)
        set_eager_experts(ref)
    else:
        ref = cls.from_pretrained(str(hf_dir), **kw)
    ref.to(dev).eval()
    log(f"reference: attention {ref.config._attn_implementation}, dtype {next(ref.parameters()).dtype}, "
        f"buffers {sorted({str(b.dtype) for b in ref.buffers()})}")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    V = ref.config.vocab_size
    res, full, n_floats = [], [], 0
    n_exp = (getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", 1)) if moe else 1
    usage = torch.zeros(cfg.num_hidden_layers, n_exp, dtype=torch.long)
    fwd = dict(output_router_logits=True) if moe else {}
    with torch.no_grad():
        for pi, p in enumerate(prompts):
            ids = hf_tok.encode(p["text"], add_special_tokens=False)
            assert ids == p["ids"]
            o = ref(input_ids=torch.tensor([ids], device=dev), **fwd)
            lg = o.logits[0].double()
            assert lg.dtype == torch.float64
            for li, rl in enumerate(getattr(o, "router_logits", None) or []):
                sel = torch.topk(rl, cfg.num_experts_per_tok, dim=-1).indices.flatten().cpu()
                usage[li] += torch.bincount(sel, minlength=n_exp)
            tv, ti = torch.topk(lg, 10, dim=-1)
            e = dict(text=p["text"], ids=ids, top10_ids=ti.tolist(),
                     top10_logits=[[round(float(x), 6) for x in row] for row in tv.tolist()])
            if pi < 2:
                e["full_logits_offset_floats"] = n_floats
                e["full_logits_shape"] = [len(ids), V]
                full.append(lg.cpu().numpy().astype(np.float32).tobytes())
                n_floats += len(ids) * V
            seqi = list(ids)
            g_ids, g_top5 = [], []
            for _ in range(args.n_greedy):
                last = ref(input_ids=torch.tensor([seqi], device=dev)).logits[0, -1].double()
                tv5, ti5 = torch.topk(last, 5)
                g_top5.append(dict(ids=ti5.tolist(), logits=[round(float(x), 6) for x in tv5.tolist()]))
                nxt = int(ti5[0])
                g_ids.append(nxt)
                seqi.append(nxt)
            e["greedy_ids"] = g_ids
            e["greedy_text"] = hf_tok.decode(g_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            e["greedy_top5"] = g_top5
            res.append(e)
            margin = min(t["logits"][0] - t["logits"][1] for t in g_top5)
            log(f"prompt {pi}: {len(ids)} ids, greedy {e['greedy_text'][:90]!r} (smallest top1-top2 margin {margin:.4f})")
    if moe:
        log(f"experts chosen per layer over the prompts: {usage.tolist()}")
    how = "float64 throughout" if everywhere else "float64 with HF's float32 RMSNorm, RoPE and softmax"
    doc = dict(model=spec["name"], dtype_of_reference=f"{how} (HF transformers, eager attention)", prompts=res)
    del ref
    return doc, b"".join(full)


def stage_build(args):
    import torch
    import transformers

    spec = ARCHS[args.arch]
    work = Path(args.work).resolve()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    hf_dir = out / "hf"
    hf_dir.mkdir(exist_ok=True)
    torch.manual_seed(args.seed)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}")
    dev = "cuda"

    vocab = json.loads((work / "vocab.json").read_text())
    prompts = json.loads((work / "prompts.json").read_text())
    tokref = json.loads((work / "tokref.json").read_text())

    # (a) tokenizer
    hf_tok = build_tokenizer(spec, vocab, hf_dir)
    if check_tokenizer(hf_tok, tokref, prompts):
        raise SystemExit("tokenizer does not match the references")

    # (b) model
    cfg = spec["make_config"](transformers, vocab)
    cls = getattr(transformers, spec["hf_class"])
    cfg._attn_implementation = "eager"  # gpt-oss's sinks need it; the others train as well with it
    model = cls(cfg)
    if spec.get("moe"):
        log(f"experts implementation: {set_eager_experts(model)}")
    log(f"attention: {model.config._attn_implementation}")
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params} parameters")
    log(model)

    # converter dry run on the untrained model, so that a converter problem costs no training
    dry = out / "dry"
    round_f16_bf16(torch, model, spec.get("norm_shift", False))
    model.save_pretrained(str(dry))
    for fn in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (hf_dir / fn).exists():
            shutil.copy2(hf_dir / fn, dry / fn)
    run_converter(work, spec, dry, "f16", out / "dry.gguf")
    shutil.rmtree(dry)
    (out / "dry.gguf").unlink()

    # (c) training
    corpus = json.loads((work / "corpus.json").read_text())
    eos = vocab["eos_token_id"]
    docs = corpus["english"] * 3 + corpus["code"]
    enc = hf_tok(docs, add_special_tokens=False)["input_ids"]
    stream = []
    for ids in enc:
        stream += ids + [eos]
    data = torch.tensor(stream, dtype=torch.long, device=dev)
    log(f"training tokens: {len(stream)}")
    model.to(dev).train()
    seq, bs = args.seq, args.batch
    ar = torch.arange(seq, device=dev)[None, :]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    moe = spec.get("moe", False)
    coef = cfg.router_aux_loss_coef if moe else 0.0
    fwd = dict(output_router_logits=True) if moe else {}
    t0 = time.time()
    step, ce_hist = 0, []
    while True:
        el = time.time() - t0
        if el >= args.train_seconds:
            break
        frac = el / args.train_seconds
        lr = args.lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + __import__("math").cos(3.14159265 * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ix = torch.randint(0, len(stream) - seq - 1, (bs, 1), device=dev)
        x = data[ix + ar]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            o = model(input_ids=x, labels=x, **fwd)
        loss = o.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            aux = getattr(o, "aux_loss", None)
            ce = (o.loss - coef * aux).item() if aux is not None else o.loss.item()
            ce_hist.append(ce)
            if step % 250 == 0:
                log(f"step {step} t={el:.0f}s lr={lr:.2e} ce={ce:.3f}" + (f" aux={aux.item():.3f}" if aux is not None else ""))
    seconds = time.time() - t0
    final = sum(ce_hist[-8:]) / max(1, len(ce_hist[-8:]))
    train = dict(steps=step, seconds=round(seconds, 1), final_train_loss=round(final, 3))
    log(f"train: {train}")

    # rounding + (d) HF folder
    model.eval()
    round_f16_bf16(torch, model, spec.get("norm_shift", False))
    if moe:
        model.config.output_router_logits = False
    model.to(torch.bfloat16).save_pretrained(str(hf_dir))
    hf_tok.save_pretrained(str(hf_dir))
    tc_path = hf_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc.update(add_bos_token=vocab["add_bos_token"], add_prefix_space=False, errors="replace",
              chat_template=vocab["chat_template"])
    tc_path.write_text(json.dumps(tc, ensure_ascii=False, indent=2))
    (hf_dir / "train.json").write_text(json.dumps(train))
    del model, opt
    torch.cuda.empty_cache()

    # (e) float64 references on the saved weights
    try:
        with Float64Everywhere(torch):
            doc, full = float64_references(torch, transformers, spec, cfg, hf_dir, prompts, args, dev, True)
    except Exception as e:  # noqa: BLE001
        log(f"FLOAT64 CONTEXT FAILED ({type(e).__name__}: {e}); references with HF's float32 islands instead")
        doc, full = float64_references(torch, transformers, spec, cfg, hf_dir, prompts, args, dev, False)
    doc["train"] = train
    (out / f"{spec['name']}.ref.json").write_text(json.dumps(doc, ensure_ascii=False))
    (out / f"{spec['name']}.logits.f32").write_bytes(full)
    torch.cuda.empty_cache()

    # GGUF by llama.cpp's converter
    for t, T in (("f16", "F16"), ("bf16", "BF16")):
        tail = run_converter(work, spec, hf_dir, t, out / f"{spec['name']}-{T}.gguf")
        (out / f"convert-{T}.log").write_text(tail)
    log("build done")


# ----------------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=sorted(ARCHS))
    sub = ap.add_subparsers(dest="stage", required=True)
    s = sub.add_parser("fetch-converter")
    s.add_argument("dir")
    s = sub.add_parser("prep")
    s.add_argument("--work", required=True, help="ignored folder to carry to the GPU machine")
    s.add_argument("--converter", help="folder written by fetch-converter (copied to WORK/conv)")
    s = sub.add_parser("build")
    s.add_argument("--work", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--train-seconds", type=float, default=150.0)
    s.add_argument("--batch", type=int, default=32)
    s.add_argument("--seq", type=int, default=256)
    s.add_argument("--lr", type=float, default=2e-3)
    s.add_argument("--seed", type=int, default=1234)
    s.add_argument("--n-greedy", type=int, default=48)
    s = sub.add_parser("llamacpp")
    s.add_argument("--ref", required=True)
    s.add_argument("--outdir", required=True)
    s.add_argument("--port", type=int, default=18123)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--eog", type=int, nargs="+", default=[8192, 8194])
    s.add_argument("--teacher-forced", action="store_true",
                   help="also the teacher-forced top-1 agreement QuantGolden measures (quantized files)")
    s.add_argument("gguf", nargs="+")
    s = sub.add_parser("carry-llamacpp")
    s.add_argument("dir", help="ignored folder to carry (e.g. build-mini-carry/llamacpp)")
    s = sub.add_parser("quantize")
    s.add_argument("--f16", required=True, help="the F16 GGUF of the build stage")
    s.add_argument("--outdir", required=True)
    s.add_argument("--work", help="work folder (its conv/gguf-py is used when given)")
    s.add_argument("--tool", default=str(SHARED / "tools/llamacpp"), help="runs TOOL ARGS of llama.cpp")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--types", nargs="+", default=list(quant.QUANT_TYPES), choices=list(quant.QUANT_TYPES))
    s = sub.add_parser("dequant-ref")
    s.add_argument("--work", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--n-greedy", type=int, default=48)
    s.add_argument("gguf", nargs="+")
    args = ap.parse_args()
    own = {"fetch-converter": stage_fetch_converter, "prep": stage_prep, "build": stage_build}
    if args.stage in own:
        own[args.stage](args)
    else:   # carry-llamacpp, quantize, dequant-ref, llamacpp: arch_mini_quant's, given this module
        getattr(quant, "stage_" + args.stage.replace("-", "_"))(args, sys.modules[__name__])


if __name__ == "__main__":
    main()
