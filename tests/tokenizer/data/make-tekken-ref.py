#!/usr/bin/python3
"""Writes tekken.llamacpp.json: llama.cpp's token ids for strings under the "tekken" pre-tokenizer.

There is no Mistral vocabulary in the test data, so the vocabulary is Llama 3's (llama3-vocab.gguf, a
128k byte-level BPE like tekken's 131k one) with tokenizer.ggml.pre = "tekken" and a few merges appended
(extra_tokens, extra_merges; last in rank, so they apply after all others). Llama 3 was trained with a
regex that splits marks off letters and never splits at a change of case, so none of its merges crosses
the places where tekken's split and llama.cpp's differ and every string would get the same ids either
way; each appended merge crosses one such place, so that the ids tell the two splits apart. llama-server
needs weights, so the GGUF it loads is llama-mini-F16.gguf's with the embedding grown to the vocabulary
(values are irrelevant to /tokenize). Per case the file records:
  ids     llama.cpp's /tokenize of the whole text (add_special false);
  pieces  the split by tekken's own regex (tokenizer.json / tekken.json) in Python's `regex` module;
  ids_by_piece, only where llama.cpp's split differs from `pieces`: llama.cpp's ids of each piece alone.
llama.cpp cannot run tekken's regex (its std::regex path has no \\p{Lu} and kin): it runs an approximation
with [^a-z] and [^A-Z] over \\p{L}, which takes every non-ASCII letter for both upper and lower case and
leaves combining marks out of letter runs.
Where that changes the split, `ids` is llama.cpp's answer to a different split and `ids_by_piece` is the
answer for tekken's own split. A piece is sent to the tekken GGUF when llama.cpp keeps it whole there,
else to a copy with pre "bloom" (regex ` ?[^(\\s|.,!?…。，、।۔،)]+`, which keeps it whole); bloom does not
ignore merges, so such a piece must not be a whole vocabulary entry (checked).

Run from the repository root (Debian's python3 with numpy and python3-regex; gguf-py comes with the
llama.cpp tool):
  ../shared/tools/llamacpp llama-cli --version  # installs llama.cpp and gguf-py under /tmp/llamacpp
  apt-get install -y python3-regex
  /usr/bin/python3 tests/tokenizer/data/make-tekken-ref.py tests/tokenizer/data/tekken.llamacpp.json
"""
import argparse
import os
import subprocess
import sys
import tempfile

from llamacpp_tok import Server, byte_encoder, extend_vocab, make_model, split, write_reference

TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_TEKKEN regex (src/llama-vocab.cpp), which it runs with std::regex on
# text whose non-ASCII code points are collapsed to one byte per category; on the real text in `regex`
# it splits the same way, which the script checks against llama.cpp's ids below.
LLAMACPP_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
                   r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
                   r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"

# Merges appended to the vocabulary, as the text of their two sides (each already a token). The first
# four join across places where tekken's regex keeps one piece and llama.cpp's splits ("É"+"COLE",
# a letter and its combining mark); the others across places where tekken splits and llama.cpp does
# not (lower case to non-ASCII upper case).
EXTRA_MERGES = [
    ("É", "CO"),
    ("e", "\u0301"),
    ("n", "\u0303"),
    ("ह", "िन"),
    ("ße", "Ö"),
    ("ет", "М"),
]

CASES = [
    "Hello world",
    "HelloWorld",
    "iPhone",
    "McDonald",
    "camelCaseVariableName",
    "getHTTPResponseCode",
    "HTTPServer and XMLHttpRequest",
    "ALLCAPS WORDS HERE",
    "NASA's JSON-RPC API",
    "I'm sure you're right, they've said we'd go and she'll come.",
    "O'Reilly's book",
    "12345",
    "3.14159 and 1,000,000 and 2024-07-18",
    "mixedCASEandNumbers123abc",
    "a/b//\n\n",
    "path/to/file.txt\nnext/",
    "http://example.com/a/b?c=d&e=f",
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "\tTabbed\tline\n",
    "line1\nline2\r\nline3\n\n\nend",
    "Hello, world! How's it going?!?",
    "x = y + z; // comment\n",
    "def foo(bar):\n    return bar * 2\n",
    "<html><body>Text</body></html>",
    "$100.00 (USD) — €85 — ¥1000",
    "你好世界",
    "日本語のテキストです。カタカナ",
    "한국어 텍스트",
    "café naïve résumé",
    "ÉCOLE Normale Supérieure",
    "Straße, Öl, Ärger, über",
    "straßeÖl",
    "ПриветМир",
    "Привет, мир! МОСКВА",
    "Ελληνικά ΚΕΦΑΛΑΙΑ",
    "e\u0301cole, pe\u0301tanque",
    "n\u0303o A\u030a",
    "हिन्दी भाषा",
    "ǅemal ǈubljana",
    "ʰello ʷorld",
    "emoji 😀🎉👍🏽 and 👨‍👩‍👧",
    "🤖 robots",
    "Mistral-Nemo-Instruct-2407",
    "mektedir",  # whole Llama 3 tokens that merging by rank would split (ignore_merges)
    ".:.:.:.:.:.:.:.:",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--data", default=os.environ.get("MINFER_TEST_DATA", "../shared"))
    ap.add_argument("--llamacpp", default="../shared/tools/llamacpp")
    ap.add_argument("--port", type=int, default=18231)
    args = ap.parse_args()
    sys.path.insert(0, "/tmp/llamacpp/root/usr/lib/python3/dist-packages")
    import gguf

    base = os.path.join(args.data, "models/llama-mini-F16.gguf")
    vocab = os.path.join(args.data, "models/llama3-vocab.gguf")
    version = subprocess.run([args.llamacpp, "llama-server", "--version"], capture_output=True,
                             text=True).stderr.strip().splitlines()[0]
    enc = byte_encoder()
    tokens, types, merges, extra_tokens, extra_merges = extend_vocab(gguf, vocab, EXTRA_MERGES)
    token_set = set(tokens)
    with tempfile.TemporaryDirectory() as tmp:
        make_model(gguf, f"{tmp}/tekken.gguf", "tekken", base, vocab, (tokens, types, merges))
        make_model(gguf, f"{tmp}/bloom.gguf", "bloom", base, vocab, (tokens, types, merges))
        log = open(f"{tmp}/server.log", "w")
        tekken = Server(args.llamacpp, f"{tmp}/tekken.gguf", args.port, log)
        bloom = Server(args.llamacpp, f"{tmp}/bloom.gguf", args.port + 1, log)
        try:
            cases = []
            for text in CASES:
                ids = tekken.tokenize(text)
                pieces = split(TEKKEN, text)
                approx = split(LLAMACPP_TEKKEN, text)
                # The approximation's pieces one by one must give llama.cpp's ids for the whole text.
                assert [i for p in approx for i in tekken.tokenize(p)] == ids, text
                case = {"text": text, "ids": ids, "pieces": pieces}
                if approx != pieces:
                    by_piece = []
                    for p in pieces:
                        if split(LLAMACPP_TEKKEN, p) == [p]:
                            by_piece += tekken.tokenize(p)
                        else:
                            assert split(BLOOM, p) == [p], p
                            assert "".join(enc[b] for b in p.encode()) not in token_set, p
                            by_piece += bloom.tokenize(p)
                    case["ids_by_piece"] = by_piece
                cases.append(case)
        finally:
            tekken.stop()
            bloom.stop()
    ref = {
        "about": "llama.cpp's ids under tokenizer.ggml.pre = tekken on the Llama 3 vocabulary "
                 "(llama3-vocab.gguf); made by make-tekken-ref.py, whose docstring explains each field",
        "llamacpp": version,
        "vocabulary": "llama3-vocab.gguf",
        "extra_tokens": extra_tokens,
        "extra_merges": extra_merges,
        "regex": TEKKEN,
    }
    write_reference(args.out, ref, cases)
    differ = [c for c in cases if "ids_by_piece" in c]
    print(f"{len(cases)} cases; {len(differ)} where llama.cpp's regex splits differently, "
          f"{sum(c['ids'] != c['ids_by_piece'] for c in differ)} of them with different ids", file=sys.stderr)


if __name__ == "__main__":
    main()
