#!/usr/bin/python3
"""Writes gpt4o.llamacpp.json: llama.cpp's token ids for strings under the "gpt-4o" pre-tokenizer.

"gpt-4o" is tiktoken's o200k_base (o200k_harmony of gpt-oss has the same pat_str). There is no o200k
vocabulary in the test data, so, as make-tekken-ref.py does for tekken, the vocabulary is Llama 3's
(llama3-vocab.gguf) with tokenizer.ggml.pre = "gpt-4o" and a few merges appended (extra_tokens,
extra_merges; last in rank). Llama 3's regex splits contractions off words and marks off letters and
never splits at a change of case, so none of its merges crosses those places; each appended merge
crosses one, so that the ids tell o200k's split from llama-bpe's, tekken's and llama.cpp's
approximation. llama-server needs weights, so the GGUF it loads is llama-mini-F16.gguf's with the
embedding grown to the vocabulary (values are irrelevant to /tokenize). Per case the file records:
  ids     llama.cpp's /tokenize of the whole text (add_special false);
  pieces  the split by o200k's own regex (tiktoken's pat_str) in Python's `regex` module;
  ids_by_piece, only where it differs from `ids`: the ids of each piece alone, the way tiktoken encodes
          it: a piece that is a whole vocabulary entry is that entry's id (tiktoken looks a piece up
          before merging; llama.cpp does not set ignore_merges for gpt-4o and merges by rank), any other
          piece is llama.cpp's ids of that piece alone.
llama.cpp cannot run o200k's regex (its std::regex path has no \\p{Lu} and kin): it runs an approximation
with [^a-z] and [^A-Z] over \\p{L}, which takes every non-ASCII letter for both upper and lower case and
leaves combining marks out of letter runs. A piece is sent to the gpt-4o GGUF when llama.cpp keeps it
whole there, else to a copy with pre "bloom" (regex ` ?[^(\\s|.,!?…。，、।۔،)]+`, which keeps it whole);
neither ignores merges, and such a piece is not a whole vocabulary entry (those are looked up).
The script also checks its own BPE (merge by rank) against llama.cpp on every piece, and that the
regexes of llama-bpe and tekken give other ids than o200k's for some cases.

Run from the repository root (Debian's python3 with numpy and python3-regex; gguf-py comes with the
llama.cpp tool):
  ../shared/tools/llamacpp llama-cli --version  # installs llama.cpp and gguf-py under /tmp/llamacpp
  apt-get install -y python3-regex
  /usr/bin/python3 tests/tokenizer/data/make-gpt4o-ref.py tests/tokenizer/data/gpt4o.llamacpp.json
"""
import argparse
import os
import subprocess
import sys
import tempfile

from llamacpp_tok import Server, byte_encoder, extend_vocab, make_model, split, write_reference

# tiktoken's o200k_base pat_str (tiktoken_ext/openai_public.py); llama.cpp's "original regex".
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O regex (src/llama-vocab.cpp), which it runs with std::regex on
# text whose non-ASCII code points are collapsed to one byte per category; on the real text in `regex`
# it splits the same way, which the script checks against llama.cpp's ids below.
CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
LLAMACPP_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + CONTRACTION +
                  r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + CONTRACTION +
                  r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
# Other pre-tokenizers' regexes, to check that the cases tell them from o200k's.
OTHERS = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
              r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
              r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

# Merges appended to the vocabulary, as the text of their two sides (each already a token). The first
# three join a word and its contraction (o200k keeps them in one piece; llama-bpe splits them); "camel"
# + "Case" joins across a change of case (llama-bpe keeps one piece; o200k splits); the others join
# across places where o200k's regex keeps one piece and llama.cpp's splits ("É"+"COLE", a letter and
# its combining mark) or where o200k splits and llama.cpp does not (lower case to non-ASCII upper).
EXTRA_MERGES = [
    ("John", "'s"),
    ("LO", "'S"),
    ("DON", "'T"),
    ("camel", "Case"),
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
    "John's book, HELLO'S shout",
    "DON'T SHOUT, I'M HERE",
    "NASA's JSON-RPC API",
    "I'm sure you're right, they've said we'd go and she'll come.",
    "We'LL see what THEY'VE done",
    "O'Reilly's book",
    "ÖL'S straße's",
    "12345",
    "1234567890 and 42 and 7",
    "3.14159 and 1,000,000 and 2024-07-18",
    "mixedCASEandNumbers123abc",
    "a/b//\n\n",
    "path/to/file.txt\nnext/",
    ")\n/usr/bin\n\n//",
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
    "gpt-oss-20b <|start|>",
    "mektedir",  # a whole Llama 3 token that merging by rank would split (tiktoken looks it up whole)
    ".:.:.:.:.:.:.:.:",
]


class Bpe:
    """Byte-level BPE over the extended vocabulary: tiktoken's (whole pieces first) or by rank only."""

    def __init__(self, tokens, merges):
        self.enc = byte_encoder()
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.rank = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}

    def text(self, piece):
        return "".join(self.enc[b] for b in piece.encode())

    def encode(self, piece, ignore_merges=True):
        if ignore_merges and self.text(piece) in self.ids:
            return [self.ids[self.text(piece)]]
        s = [self.enc[b] for b in piece.encode()]
        while len(s) > 1:
            i = min(range(len(s) - 1), key=lambda i: self.rank.get((s[i], s[i + 1]), len(self.rank)))
            if (s[i], s[i + 1]) not in self.rank:
                break
            s[i:i + 2] = [s[i] + s[i + 1]]
        return [self.ids[t] for t in s]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--data", default=os.environ.get("MINFER_TEST_DATA", "../shared"))
    ap.add_argument("--llamacpp", default="../shared/tools/llamacpp")
    ap.add_argument("--port", type=int, default=18241)
    args = ap.parse_args()
    sys.path.insert(0, "/tmp/llamacpp/root/usr/lib/python3/dist-packages")
    import gguf

    base = os.path.join(args.data, "models/llama-mini-F16.gguf")
    vocab = os.path.join(args.data, "models/llama3-vocab.gguf")
    version = subprocess.run([args.llamacpp, "llama-server", "--version"], capture_output=True,
                             text=True).stderr.strip().splitlines()[0]
    tokens, types, merges, extra_tokens, extra_merges = extend_vocab(gguf, vocab, EXTRA_MERGES)
    bpe = Bpe(tokens, merges)
    with tempfile.TemporaryDirectory() as tmp:
        make_model(gguf, f"{tmp}/gpt4o.gguf", "gpt-4o", base, vocab, (tokens, types, merges))
        make_model(gguf, f"{tmp}/bloom.gguf", "bloom", base, vocab, (tokens, types, merges))
        log = open(f"{tmp}/server.log", "w")
        gpt4o = Server(args.llamacpp, f"{tmp}/gpt4o.gguf", args.port, log)
        bloom = Server(args.llamacpp, f"{tmp}/bloom.gguf", args.port + 1, log)
        try:
            cases = []
            for text in CASES:
                ids = gpt4o.tokenize(text)
                pieces = split(O200K, text)
                approx = split(LLAMACPP_GPT4O, text)
                # The approximation's pieces one by one must give llama.cpp's ids for the whole text.
                assert [i for p in approx for i in gpt4o.tokenize(p)] == ids, text
                by_piece = []
                for p in pieces:
                    if bpe.text(p) in bpe.ids:
                        got = [bpe.ids[bpe.text(p)]]
                    elif split(LLAMACPP_GPT4O, p) == [p]:
                        got = gpt4o.tokenize(p)
                    else:
                        assert split(BLOOM, p) == [p], p
                        got = bloom.tokenize(p)
                    assert got == bpe.encode(p), (p, got, bpe.encode(p))  # this script's BPE agrees
                    by_piece += got
                case = {"text": text, "ids": ids, "pieces": pieces}
                if by_piece != ids:
                    case["ids_by_piece"] = by_piece
                cases.append(case)
        finally:
            gpt4o.stop()
            bloom.stop()
    for name, pattern in OTHERS.items():
        told = sum([i for p in split(pattern, c["text"]) for i in bpe.encode(p)] !=
                   c.get("ids_by_piece", c["ids"]) for c in cases)
        print(f"{name}'s regex gives other ids for {told} of {len(cases)} cases", file=sys.stderr)
        assert told > 0, name
    ref = {
        "about": "llama.cpp's ids under tokenizer.ggml.pre = gpt-4o on the Llama 3 vocabulary "
                 "(llama3-vocab.gguf); made by make-gpt4o-ref.py, whose docstring explains each field",
        "llamacpp": version,
        "vocabulary": "llama3-vocab.gguf",
        "extra_tokens": extra_tokens,
        "extra_merges": extra_merges,
        "regex": O200K,
    }
    write_reference(args.out, ref, cases)
    differ = [c for c in cases if "ids_by_piece" in c]
    split_differ = sum(split(LLAMACPP_GPT4O, c["text"]) != c["pieces"] for c in cases)
    print(f"{len(cases)} cases; {split_differ} where llama.cpp's regex splits differently; "
          f"{len(differ)} where tiktoken's ids of the pieces differ from llama.cpp's ids of the text",
          file=sys.stderr)


if __name__ == "__main__":
    main()
