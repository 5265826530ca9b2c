"""What make-tekken-ref.py and make-gpt4o-ref.py share: a vocabulary GGUF with merges appended, a model
llama-server can load with it, llama-server's /tokenize, and the reference file's layout."""
import json
import subprocess
import sys
import time
import urllib.request

import numpy as np
import regex


def byte_encoder():
    """GPT-2's byte-to-unicode table of byte-level BPE token strings."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def split(pattern, text):
    pieces = [m.group(0) for m in regex.finditer(pattern, text) if m.group(0)]
    assert "".join(pieces) == text, (pattern, text, pieces)
    return pieces


def copy_fields(gguf, w, r, skip):
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or skip(k):
            continue
        t = f.types[0]
        w.add_key_value(k, f.contents(), t, sub_type=f.types[-1] if t == gguf.GGUFValueType.ARRAY else None)


def extend_vocab(gguf, vocab, extra):
    """vocab's tokens, token types and merges, with the merges `extra` (pairs of strings) and the tokens
    they make appended."""
    rv = gguf.GGUFReader(vocab)
    tokens = rv.fields["tokenizer.ggml.tokens"].contents()
    types = rv.fields["tokenizer.ggml.token_type"].contents()
    merges = rv.fields["tokenizer.ggml.merges"].contents()
    enc = byte_encoder()
    known = set(tokens)
    extra_tokens, extra_merges = [], []
    for left, right in extra:
        left, right = ("".join(enc[b] for b in side.encode()) for side in (left, right))
        assert left in known and right in known, (left, right)
        extra_merges.append(f"{left} {right}")
        if left + right not in known:
            extra_tokens.append(left + right)
            known.add(left + right)
    return tokens + extra_tokens, types + [1] * len(extra_tokens), merges + extra_merges, extra_tokens, \
        extra_merges


def make_model(gguf, out, pre, base, vocab, extended):
    """base's weights (the embedding grown to the vocabulary, output tied) with vocab's tokenizer,
    whose tokens, types and merges are `extended`."""
    rb, rv = gguf.GGUFReader(base), gguf.GGUFReader(vocab)
    tokens, types, merges = extended
    n_vocab = len(tokens)
    w = gguf.GGUFWriter(out, "llama")
    copy_fields(gguf, w, rb, lambda k: k.startswith("tokenizer."))
    copy_fields(gguf, w, rv, lambda k: not k.startswith("tokenizer.") or k in
                ("tokenizer.ggml.pre", "tokenizer.chat_template", "tokenizer.ggml.tokens",
                 "tokenizer.ggml.token_type", "tokenizer.ggml.merges"))
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for t in rb.tensors:
        if t.name == "output.weight":
            continue
        a = np.array(t.data)
        if t.name == "token_embd.weight":
            a = np.resize(a, (n_vocab, a.shape[1]))
        w.add_tensor(t.name, a, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class Server:
    def __init__(self, llamacpp, model, port, log):
        self.port = port
        self.proc = subprocess.Popen([llamacpp, "llama-server", "-m", model, "--port", str(port), "-t", "2",
                                      "-c", "512"], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health")
                return
            except OSError:
                if self.proc.poll() is not None:
                    sys.exit(f"llama-server exited; see {log.name}")
                time.sleep(0.5)
        sys.exit("llama-server did not start")

    def tokenize(self, text):
        body = json.dumps({"content": text, "add_special": False}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/tokenize", body,
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req))["tokens"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def write_reference(out, ref, cases):
    """The reference as JSON: the header indented, then one case a line."""
    with open(out, "w") as f:
        f.write(json.dumps(ref, ensure_ascii=False, indent=1).removesuffix("\n}"))
        f.write(',\n "cases": [\n  ' + ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n ]\n}\n")
