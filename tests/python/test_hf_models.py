#!/usr/bin/env python3
"""tandem on Hugging Face model folders, checked against the Hugging Face libraries themselves.

The folders are the fetched Qwen2.5-Coder GGUFs written out by scripts/gguf_to_hf.py
(<cache>/hf/qwen0.5b, <cache>/hf/qwen1.5b; converted here when missing, a no-op when done).

1. The model, against `transformers` as an independent oracle: `tandem serve -m FOLDER`
   generates greedily with logprobs (code prompts through /v1/completions as token ids, chat
   prompts through /v1/chat/completions as messages), and transformers (float32 on the CPU, the
   bf16 weights upcast) reads the same prompt and tandem's output in one teacher-forced pass.
   At every position tandem's token must be transformers' argmax, unless transformers has a
   near tie there; its top-5 logprobs must match transformers' log-softmax, and no token that
   transformers ranks clearly above tandem's fifth may be missing. The prompt tokens must agree
   (the chat template rendered by tandem's Jinja against transformers' apply_chat_template).
2. Tokenization, against `tokenizers` on the folder's tokenizer.json: several thousand strings
   (many scripts, combining and non-NFC sequences, Hangul jamo, whitespace runs, code, numbers,
   emoji, special tokens inside text, seeded random mixes) through /tokenize, and a sample of
   them back through /detokenize against tokenizers' decode; random id lists (byte fragments
   of characters among them) through /detokenize. /tokenize always matches special tokens in
   the text (as tokenizers does with its added tokens): the server has no way to ask for
   tokenizers' encode_special_tokens=True, so that mode is not tested here. Text whose NFC
   differs between Unicode 9.0 (tokenizers' normalizer tables) and 14.0 (Python's) is tested
   on its own as well (test_tokenize_marks_newer_than_tokenizers_nfc).
3. Speculation with a folder as the target: `tandem generate --json` greedy with a draft (the
   0.5B GGUF, or the 0.5B folder re-quantized to Q4_0 at load, for the 0.5B folder; the 0.5B
   folder for the 1.5B folder) gives the same tokens as without one (some drafts rejected).

    python3 tests/python/test_hf_models.py --tandem build/release/apps/tandem [-k pattern] [--report]

Missing prerequisites follow the policy of the C++ model tests (tests/support/paths.hpp): exit
code 77 (ctest: skipped) when qwen0.5b, which every test needs, is not in this run's model set
(TANDEM_TEST_MODELS); without qwen1.5b its test is skipped, saying so; a model of the
set that is not downloaded, or a missing Python module (torch, transformers, tokenizers, openai),
fails unless TANDEM_ALLOW_SKIP=1 accepts skipping deliberately.
"""
import argparse
import atexit
import functools
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unicodedata
import unittest

from forward_ref import bytes_to_unicode  # GPT-2's byte alphabet (tests/python, beside this file)

# The folders are local; no download, no progress bars.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
MANIFEST = os.path.join(ROOT, "scripts", "models.json")
SKIP = 77
KEYS = ("qwen0.5b", "qwen1.5b", "smollm2", "gemma3")  # scripts/models.json keys this test needs

# ---- tolerances ------------------------------------------------------------------------
# Both sides start from the same bf16 weights; transformers computes in float32. Each bound is
# on |tandem's logprob - transformers' log-softmax| for every one of tandem's top-5 tokens (and
# the chosen one) at every position; measured on the prompts below (Qwen2.5-Coder-0.5B folder,
# the CPU backend, AVX-512 and 2 threads):
#  * KV cache f32: the largest difference was 0.00006 nats (median 0.00001), also over a wider
#    sweep of 40 prompts (887 positions): tandem's forward is float32 arithmetic on the upcast
#    weights, only summed in another order. KV_F32_TOL is about 15x that; a wrong kernel,
#    layout, RoPE or norm detail moves logprobs by 0.01 to whole nats.
KV_F32_TOL = 1e-3
#  * KV cache f16 (the default): rounding K and V to half precision is the whole difference:
#    the largest was 0.0285 nats over the prompts below (243 positions; median 0.003, 99th
#    percentile 0.014), 0.0302 over the 40-prompt sweep. KV_F16_TOL leaves 1.65x of that.
KV_F16_TOL = 0.05
# Near ties: where transformers' best token leads the one tandem chose by less than 2 * tol,
# tandem's pick is legitimate (each side is within tol of the truth, so such a margin can
# flip). Positions after such a flip are still compared: transformers reads tandem's tokens,
# teacher-forced, so its rows stay the reference.
# At least this share of all positions must be compared on transformers' own greedy path (before
# any near-tie flip), so that the check cannot pass vacuously.
MIN_ON_PATH = 0.8
N_TOKENS = 24  # generated per prompt

ARGS = None
MODEL_DIRS = {}  # key -> HF folder, for the keys of this run
OUT_OF_SET = {}  # key -> why its tests are skipped
CACHE_DIR = tempfile.mkdtemp(prefix="tandem-hf-test-cache-")  # TANDEM_CACHE of the processes started here


def models_root():
    return os.environ.get("TANDEM_MODELS") or os.path.expanduser("~/.cache/tandem/models")


def gguf_path(key):
    with open(MANIFEST) as f:
        return os.path.join(models_root(), json.load(f)["models"][key]["file"])


def missing_prerequisite():
    """None when the tests can run, else (exit code, message) as tests/support/paths.hpp decides.
    Fills MODEL_DIRS with the keys of this run (converting their folders) and OUT_OF_SET."""
    allow_skip = os.environ.get("TANDEM_ALLOW_SKIP") == "1"
    model_set = os.environ.get("TANDEM_TEST_MODELS") or "all"
    with open(MANIFEST) as f:
        known = list(json.load(f)["models"])
    keys = [k.strip() for k in model_set.split(",") if k.strip()] if model_set not in ("all", "none") else []
    unknown = [k for k in keys if k not in known]
    if unknown:
        return 1, (f"FAILED: TANDEM_TEST_MODELS={model_set} names an unknown model '{unknown[0]}' "
                   f"(known: {', '.join(known)}, or all, none)")
    wanted = []
    for key in KEYS:
        if model_set != "all" and key not in keys:
            OUT_OF_SET[key] = f"model '{key}' is not in this run's model set (TANDEM_TEST_MODELS={model_set})"
            continue
        if not os.path.exists(gguf_path(key)):
            fetch = f"python3 scripts/fetch_models.py --models {key}"
            if allow_skip:
                OUT_OF_SET[key] = (f"model '{key}' not downloaded ({gguf_path(key)}); skipped because "
                                   f"TANDEM_ALLOW_SKIP=1. To test it: {fetch}")
                continue
            return 1, (f"FAILED: model '{key}' not downloaded ({gguf_path(key)}). Run: {fetch} — or set "
                       f"TANDEM_ALLOW_SKIP=1 to skip the tests of missing models deliberately, or leave "
                       f"'{key}' out of TANDEM_TEST_MODELS (now {model_set})")
        wanted.append(key)
    if "qwen0.5b" not in wanted:  # every test needs it (the 1.5B one as the draft)
        return SKIP, "SKIPPED: " + "; ".join(OUT_OF_SET.values())
    for module in ("torch", "transformers", "tokenizers", "safetensors", "openai", "gguf", "numpy"):
        try:
            __import__(module)
        except ImportError:
            if allow_skip:
                return SKIP, f"SKIPPED: the Python module '{module}' is not installed; TANDEM_ALLOW_SKIP=1"
            return 1, (f"FAILED: the Python module '{module}' is not installed: run scripts/setup.sh (or pip "
                       f"install {module}), or set TANDEM_ALLOW_SKIP=1 to skip this test deliberately")
    # The folders: converted once (stamped; a no-op when they are current, else about a minute,
    # its progress on stderr).
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "gguf_to_hf.py"), "--models", ",".join(wanted),
           "--cache", models_root()]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    for line in r.stdout.splitlines():
        key, _, folder = line.partition(" ")
        if key in wanted:
            MODEL_DIRS[key] = folder
    if r.returncode != 0 or set(MODEL_DIRS) != set(wanted):
        return 1, f"FAILED: {' '.join(cmd)} exited with {r.returncode} (its log above):\n{r.stdout}"
    return None


def require(*keys):
    """In a test or setUpClass: skips it when one of its models is outside this run's set."""
    gone = [OUT_OF_SET[k] for k in keys if k in OUT_OF_SET]
    if gone:
        raise unittest.SkipTest("; ".join(gone))


def env():
    return dict(os.environ, TANDEM_CACHE=CACHE_DIR)


# ---- a server process ---------------------------------------------------------------


class Server:
    """`tandem serve` on a free loopback port; its log goes to a temporary file."""

    def __init__(self, model, *extra):
        self.log = tempfile.NamedTemporaryFile(prefix="tandem-hf-", suffix=".log", delete=False)
        cmd = [ARGS.tandem, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0",
               "--threads", str(ARGS.threads), "--device", ARGS.device, "--model-id", "m", *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env())
        atexit.register(self.kill)  # never left running, whatever happens to this script
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.text()}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.1)
        if self.port is None:
            self.kill()
            raise RuntimeError(f"server did not start:\n{self.text()}")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)  # kept alive

    def text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def post_raw(self, path, body):
        """POST on the kept-alive connection: the answer's body as bytes (asserts 200)."""
        data = json.dumps(body)
        for attempt in (0, 1):
            try:
                self.conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()  # the server closed an idle connection: one retry on a fresh one
                if attempt:
                    raise
        if r.status != 200:
            raise AssertionError(f"POST {path} {data[:300]} -> {r.status}: {raw[:1000]!r}")
        return raw

    def post(self, path, body):
        return json.loads(self.post_raw(path, body).decode("utf-8"))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def finish(self):
        self.conn.close()
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        rc = self.proc.returncode
        if rc != 0:
            print(f"--- server exited with {rc}; its log:\n{self.text()}", file=sys.stderr)
        os.unlink(self.log.name)
        return rc


# ---- the transformers oracle ----------------------------------------------------------

CODE_PROMPTS = [
    "def fibonacci(n):",
    "import numpy as np\n\ndef softmax(x):",
    "// Quicksort in C\nvoid quicksort(int *a, int n) {",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):",
    "fn main() {\n    let v: Vec<i32> = (1..10).collect();\n",
    "-- The ten customers with the most orders\nSELECT",
    # fill-in-the-middle, with the special tokens in the prompt
    "<|fim_prefix|>def area(r):\n    <|fim_suffix|>\n    return a<|fim_middle|>",
]
CHAT_PROMPTS = [
    [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "What is the difference between a list and a tuple in Python?"}],
    [{"role": "user", "content": "What does `git rebase` do?"},
     {"role": "assistant", "content": "It replays your commits on top of another base commit."},
     {"role": "user", "content": "And how do I undo one that went wrong?"}],
    [{"role": "user", "content": "Übersetze ins Englische: «Guten Morgen, wie geht's dir?» 日本語でも。"}],
]


def byte_decoder():
    """GPT-2 byte-level BPE: the vocabulary's characters back to bytes."""
    return {c: b for b, c in bytes_to_unicode().items()}


class Vocab:
    """Token id <-> the bytes the server reports (chat's "bytes") and the text (completions'
    keys: the bytes as UTF-8, invalid sequences replaced)."""

    def __init__(self, tokenizer_json):
        with open(tokenizer_json, encoding="utf-8") as f:
            tj = json.load(f)
        dec = byte_decoder()
        self.bytes_of = {}
        for piece, i in tj["model"]["vocab"].items():
            self.bytes_of[i] = bytes(dec[c] for c in piece) if all(c in dec for c in piece) else piece.encode()
        for t in tj["added_tokens"]:
            self.bytes_of[t["id"]] = t["content"].encode()
        self.by_bytes, self.by_text = {}, {}
        for i, b in self.bytes_of.items():
            self.by_bytes.setdefault(b, []).append(i)
            self.by_text.setdefault(b.decode("utf-8", "replace"), []).append(i)


class HfOracle:
    def __init__(self, folder):
        import torch
        import transformers
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(max(1, ARGS.threads))
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        self.model.eval()
        self.tok = transformers.AutoTokenizer.from_pretrained(folder)

    def chat_ids(self, messages):
        out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(out, "keys"):
            out = out["input_ids"]
        return list(out)

    def rows(self, prompt, tokens):
        """log-softmax (float64) of the next-token distribution after prompt + tokens[:i], for
        i = 0..len(tokens): one teacher-forced pass."""
        torch = self.torch
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:]
        return torch.log_softmax(logits.double(), dim=-1)


def compare_position(row, chosen, top, tol, shadowed=lambda token: False):
    """One position: tandem chose `chosen` and reported `top` {id: logprob} (its top-5 and the
    chosen token). Returns (status, max |diff|, note): status "argmax", "tie" (a near-tie flip)
    or an error message. shadowed(token): the token may be missing from `top` because the reply
    could not name it apart from another (completions key the alternatives by their text)."""
    torch_top = row.topk(8)
    best = int(torch_top.indices[0])
    diffs = {}
    for tid, lp in top.items():
        diffs[tid] = abs(lp - float(row[tid]))
    worst = max(diffs.values())
    ranked = ", ".join(f"{int(i)}:{float(v):.5f}" for v, i in zip(torch_top.values, torch_top.indices))
    mine = ", ".join(f"{t}:{lp:.5f}" for t, lp in sorted(top.items(), key=lambda kv: -kv[1]))
    if worst > tol:
        t = max(diffs, key=diffs.get)
        return (f"logprob of token {t}: tandem {top[t]:.5f}, transformers {float(row[t]):.5f} "
                f"(|diff| {worst:.5f} > {tol}); tandem top: {mine}; transformers top: {ranked}"), worst, ""
    # Nothing transformers ranks clearly above tandem's fifth may be missing from tandem's top-5.
    fifth = min(top.values())
    for v, i in zip(torch_top.values, torch_top.indices):
        if float(v) > fifth + tol and int(i) not in top and not shadowed(int(i)):
            return (f"token {int(i)} (transformers {float(v):.5f}) missing from tandem's top-5 "
                    f"(fifth {fifth:.5f}); tandem top: {mine}; transformers top: {ranked}"), worst, ""
    if chosen == best:
        return "argmax", worst, ""
    lead = float(row[best] - row[chosen])
    if lead < 2 * tol:
        return "tie", worst, f"near tie: tandem chose {chosen}, transformers' best {best} leads by {lead:.5f}"
    return (f"tandem chose token {chosen} ({float(row[chosen]):.5f} in transformers), but transformers' "
            f"argmax {best} leads by {lead:.5f} >= {2 * tol}; tandem top: {mine}; transformers top: {ranked}"), worst, ""


# ---- tokenization strings --------------------------------------------------------------

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
            "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_call>", "</tool_call>", "<|vision_start|>"]
# Not canonical (NFC changes them) or near it: decomposed accents, combining marks out of
# order, Hangul jamo, singletons, composition exclusions, a composed syllable with a trailing jamo.
NON_NFC = ["e\u0301", "E\u0301", "a\u0308", "o\u0302\u0301", "a\u0323\u0307", "a\u0307\u0323", "n\u0303",
           "c\u0327", "A\u030a", "\u212b", "\u2126", "\u212a", "\u1100\u1161", "\u1100\u1161\u11a8",
           "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uac00\u11a8", "\u1100", "\u1161\u11a8", "\u0344",
           "\u0958", "\u0915\u093c", "\u0626", "\u064a\u0654", "\u00c5\u0301", "\u1e9b\u0323",
           "u\u0308\u0301", "\u0041\u030a\u0301", "\u03b1\u0313\u0301\u0345", "\u0f73", "\u0f71\u0f72",
           "\u30ab\u3099", "\u304b\u3099", "\u30cf\u309a", "\u0b47\u0b3e", "\u0bc6\u0bbe", "\u0cc6\u0cd5",
           "z\u0301\u0301\u0301", "\u0301", "\u0301a", "q\u0307\u0323", "\u05d1\u05bc", "\ufb2c", "\u2000",
           "\u1026\u102e", "\U0001d15e", "\U0001d157\U0001d165"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\r\n\r\n", " \n", "\n ", "\t\n",
              "\u00a0", "\u2003", "\u3000", "\u200b", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\u1680",
              "\u202f", "\u205f", "\ufeff", "    ", "        ", " \t \n"]
WORDS = ["Hello", "world", "the", "The", "don't", "I'M", "we've", "they'LL", "naïve", "café", "Straße",
         "résumé", "Ελληνικά", "Русский", "текст", "日本語", "中文字符", "한국어", "안녕하세요", "العربية",
         "עברית", "हिन्दी", "தமிழ்", "ไทย", "ភាសាខ្មែរ", "ქართული", "Հայերեն", "አማርኛ", "ᏣᎳᎩ", "𐌰𐌱𐌲",
         "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ｆｕｌｌｗｉｄｔｈ", "ﬁ", "Ⅻ", "①②③", "½", "x²", "Ǆ", "İstanbul", "ß", "ΣΑΣ"]
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\ta[i] += b[i];\n}",
        "if __name__ == \"__main__\":\n    main()", "const x = () => { return 42; };", "#include <stdio.h>",
        "SELECT * FROM t WHERE a >= 10;", "fn main() -> Result<(), Box<dyn Error>> {", "x = [1, 2, 3]\r\n",
        "    # comment\n", "<div class=\"a\">&amp;</div>", "$ ls -la | grep '.py'", "{\"key\": [true, null, 1.5e-3]}",
        "a->b.c::d", "i++; j--; k **= 2;", "\\n\\t\\\\", "`code`", "'''doc'''", "0x1F600", "1_000_000",
        "λx. x + 1", "println!(\"{}\", v);", "   \n\n    return None\n"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "❤️", "✨", "🤖", "🧑🏿‍💻", "☃", "⌚", "🫠", "🥲", "👋🏻",
         "#️⃣", "©️", "🙂🙃", "🐍"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "3.14159", "-273.15", "1e10", "2024-06-01", "10:30",
           "１２３", "٣٤٥", "१२३", "1,000,000", "000123", "99.99%", "$5", "€10", "6.022e23"]


def tandem_unicode_version():
    """The Unicode version of tandem's NFC tables (scripts/gen_unicode_nfc.py wrote them)."""
    with open(os.path.join(ROOT, "engine", "text", "unicode_nfc_tables.cpp"), encoding="utf-8") as f:
        m = re.search(r'kUnicodeVersion = "([0-9.]+)"', f.read())
    return m.group(1) if m else None


def assigned_pool():
    """Code points of assigned characters outside the surrogates and the private use areas, to
    draw random characters from: those of Python's unicodedata (Unicode 14.0 in Python 3.11),
    where that is the version of tandem's NFC tables; else, so that no character is newer than
    the tables, only those already assigned in Unicode 3.2."""
    same = unicodedata.unidata_version == tandem_unicode_version()
    if not same:
        print(f"note: Python's unicodedata is {unicodedata.unidata_version}, tandem's NFC tables "
              f"{tandem_unicode_version()}: random characters from Unicode 3.2 only", file=sys.stderr)
    ucd = unicodedata if same else unicodedata.ucd_3_2_0
    pool = []
    for cp in list(range(0x20, 0x3400)) + list(range(0x4E00, 0x4F00)) + list(range(0xA000, 0xD7A4)) + \
            list(range(0xF900, 0x10000)) + list(range(0x10000, 0x1FB00)) + list(range(0x20000, 0x20100)):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        cat = ucd.category(chr(cp))
        if cat not in ("Cn", "Cs", "Co"):
            pool.append(chr(cp))
    return pool


def golden_texts():
    out = []
    for name in ("golden_qwen0.5b.jsonl", "golden_pretok.jsonl"):
        with open(os.path.join(ROOT, "tests", "data", "tokenizer", name), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line)["text"])
    return list(dict.fromkeys(out))


@functools.lru_cache(maxsize=None)
def tokenizer_strings(n_random):
    rng = random.Random(20240617)
    pool = assigned_pool()
    marks = [c for c in pool if unicodedata.category(c) in ("Mn", "Mc", "Me")]
    jamo_l = [chr(c) for c in range(0x1100, 0x1113)]
    jamo_v = [chr(c) for c in range(0x1161, 0x1176)]
    jamo_t = [chr(c) for c in range(0x11A8, 0x11C3)]
    latin = "abcdefghijklmnopqrstuvwxyzAEIOUaeiouCNSZ"
    strings = golden_texts()
    strings += NON_NFC + WHITESPACE + WORDS + CODE + EMOJI + NUMBERS + SPECIALS
    # every special token inside text, and broken or doubled ones
    for s in SPECIALS:
        strings += [f"a{s}b", f" {s} ", f"\n{s}\n", f"{s}{s}", f"x {s}", s[:-1], s[1:], f"<{s}>", s.upper()]
    strings += ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start", "im_start|>", "<||>", "<|>"]
    # NFC of every decomposable accented Latin letter, decomposed and composed
    for c in "àáâãäåèéêëìíîïñòóôõöùúûüýÿÀÁÂÃÄÅÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝǕǗǙǛḀḁṩẞ":
        strings += [unicodedata.normalize("NFD", c), unicodedata.normalize("NFD", f"x{c}y {c}{c}")]

    def piece():
        kind = rng.randrange(15)
        if kind == 0:
            return rng.choice(NON_NFC)
        if kind == 1:
            return rng.choice(WHITESPACE) * rng.randint(1, 3)
        if kind == 2:
            return rng.choice(WORDS)
        if kind == 3:
            return rng.choice(CODE)
        if kind == 4:
            return rng.choice(EMOJI)
        if kind == 5:
            return rng.choice(NUMBERS) + rng.choice(["", " ", ".", ","])
        if kind == 6:
            return rng.choice(SPECIALS)
        if kind == 7:  # a jamo syllable, perhaps incomplete or with a trailing consonant
            return rng.choice(jamo_l) + rng.choice(["", rng.choice(jamo_v)]) + rng.choice(["", rng.choice(jamo_t)])
        if kind == 8:  # a base letter and 1-4 combining marks in random order
            return rng.choice(latin) + "".join(rng.choice(marks) for _ in range(rng.randint(1, 4)))
        if kind == 9:
            return "".join(rng.choice(pool) for _ in range(rng.randint(1, 6)))
        if kind == 10:
            return "".join(rng.choice(" \t\n\r\u00a0\u3000") for _ in range(rng.randint(1, 8)))
        if kind == 11:
            return str(rng.randint(0, 10 ** rng.randint(1, 15)))
        if kind == 12:
            return "".join(rng.choice("abcxyz_ ()[]{}:;.,'\"=+-*/<>!?#@$%^&|\\~`") for _ in range(rng.randint(1, 10)))
        if kind == 13:
            return rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't"])
        return unicodedata.normalize("NFD", rng.choice(WORDS))

    for _ in range(n_random):
        strings.append("".join(piece() for _ in range(rng.randint(1, 10))))
    return strings


# ---- the tests ------------------------------------------------------------------------


class Timed(unittest.TestCase):
    def setUp(self):
        self._t0 = time.time()

    def tearDown(self):
        print(f"  [{time.time() - self._t0:.1f} s] ", end="", file=sys.stderr, flush=True)


class Qwen05Folder(Timed):
    """`tandem serve -m <hf/qwen0.5b>` against transformers and tokenizers."""

    @classmethod
    def setUpClass(cls):
        require("qwen0.5b")
        import tokenizers
        cls.folder = MODEL_DIRS["qwen0.5b"]
        cls.server = Server(cls.folder, "--ctx", "2048", "--max-seqs", "4", "--draft", "none")
        cls._oracle = None
        cls.tk = tokenizers.Tokenizer.from_file(os.path.join(cls.folder, "tokenizer.json"))
        cls.vocab = Vocab(os.path.join(cls.folder, "tokenizer.json"))

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.finish()
        assert rc == 0, f"server exited with {rc}"

    def tandem_ids(self, text):
        return self.server.post("/tokenize", {"content": text, "add_special": False})["tokens"]

    # -- 1. the model, against transformers --

    @classmethod
    def oracle(cls):
        if cls._oracle is None:
            cls._oracle = HfOracle(cls.folder)
        return cls._oracle

    def generate(self, server, prompt):
        """tandem's greedy output for one prompt: (prompt ids, steps, finish reason); a step is
        ((candidate ids of the chosen token, its logprob), [(candidate ids, logprob)] of the top 5)."""
        if isinstance(prompt, str):
            ids = self.tk.encode(prompt, add_special_tokens=False).ids
            got = server.post("/tokenize", {"content": prompt, "add_special": False})["tokens"]
            self.assertEqual(got, ids, f"prompt tokens of {prompt!r}")
            r = server.post("/v1/completions", {"model": "m", "prompt": ids, "max_tokens": N_TOKENS,
                                                "temperature": 0, "logprobs": 5})
            self.assertEqual(r["usage"]["prompt_tokens"], len(ids))
            lp = r["choices"][0]["logprobs"]
            steps = [((self.vocab.by_text.get(text, []), chosen_lp),
                      [(self.vocab.by_text.get(t, []), v) for t, v in top.items()])
                     for text, chosen_lp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])]
            return ids, steps, r["choices"][0]["finish_reason"]
        ids = self.oracle().chat_ids(prompt)
        self.assertEqual(server.post("/tokenize", {"messages": prompt})["tokens"], ids,
                         f"chat prompt tokens (tandem's template vs transformers' apply_chat_template) of {prompt}")
        r = server.post("/v1/chat/completions", {"model": "m", "messages": prompt, "max_tokens": N_TOKENS,
                                                 "temperature": 0, "logprobs": True, "top_logprobs": 5})
        self.assertEqual(r["usage"]["prompt_tokens"], len(ids))
        steps = [((self.vocab.by_bytes.get(bytes(e["bytes"]), []), e["logprob"]),
                  [(self.vocab.by_bytes.get(bytes(t["bytes"]), []), t["logprob"]) for t in e["top_logprobs"]])
                 for e in r["choices"][0]["logprobs"]["content"]]
        return ids, steps, r["choices"][0]["finish_reason"]

    def against_transformers(self, server, tol, label, prompts=None):
        oracle = self.oracle()
        total = on_path = ties = unresolved = 0
        worst, worst_at, all_diffs = 0.0, "", []
        per_prompt = []
        for prompt in prompts or CODE_PROMPTS + CHAT_PROMPTS:
            ids, steps, finish = self.generate(server, prompt)
            # The chosen ids: a token's text (or bytes) names one id but for a few byte fragments;
            # an ambiguous one resolves to the candidate transformers ranks highest, position by
            # position (transformers' row i needs only the tokens before i).
            chosen = [cands[0] if len(cands) == 1 else None for (cands, _), _ in steps]
            for i, ((cands, _), _) in enumerate(steps):
                if chosen[i] is None:
                    self.assertTrue(cands, f"{prompt!r} position {i}: tandem's token names no vocabulary entry")
                    row = oracle.rows(ids, chosen[:i])[-1]
                    chosen[i] = max(cands, key=lambda c: float(row[c]))
            rows = oracle.rows(ids, chosen)
            on, n_on = True, 0
            for i, ((_, chosen_lp), top) in enumerate(steps):
                row = rows[i]
                tops = {chosen[i]: chosen_lp}
                shared = set()  # ids behind the reply's ambiguous entries
                for cands, v in top:
                    if len(cands) == 1:
                        tops[cands[0]] = v
                    elif cands:  # an ambiguous text: the candidate nearest in transformers' value
                        unresolved += 1
                        shared.update(cands)
                        tops[min(cands, key=lambda c: abs(float(row[c]) - v))] = v
                status, diff, note = compare_position(row, chosen[i], tops, tol, shared.__contains__)
                if ARGS.report and diff > tol / 2:
                    print(f"\n    {label} {prompt!r} position {i}: |diff| {diff:.5f}; tandem/transformers "
                          + ", ".join(f"{t}:{v:.5f}/{float(row[t]):.5f}" for t, v in tops.items()), file=sys.stderr)
                if diff > worst:
                    worst, worst_at = diff, f"{prompt!r} position {i}"
                all_diffs.append(diff)
                if status not in ("argmax", "tie"):
                    self.fail(f"{label}: prompt {prompt!r}, position {i} (after prompt ids {ids} and tandem's "
                              f"{chosen[:i]}): {status}")
                if status == "tie":
                    ties += 1
                    on = False
                    if ARGS.report:
                        print(f"\n    {label} {prompt!r} position {i}: {note}", file=sys.stderr)
                n_on += on
                total += 1
            on_path += n_on
            if finish == "stop":  # tandem ended on an end-of-generation token: transformers' pick too
                row = rows[len(steps)]
                best = int(row.argmax())
                eog = max(float(row[e]) for e in (151643, 151645))  # <|endoftext|>, <|im_end|>
                self.assertTrue(best in (151643, 151645) or eog > float(row[best]) - 2 * tol,
                                f"{label}: prompt {prompt!r}: tandem stopped after {len(steps)} tokens, "
                                f"transformers prefers token {best} ({float(row[best]):.4f}) there")
            else:
                self.assertEqual(len(steps), N_TOKENS, f"{label}: prompt {prompt!r}: finish {finish}")
            per_prompt.append(f"{n_on}/{len(steps)}")
        all_diffs.sort()
        print(f"\n    {label}: {total} positions, {on_path} on transformers' greedy path ({', '.join(per_prompt)}), "
              f"{ties} near-tie flips; max |logprob diff| {worst:.5f} (tolerance {tol}; median "
              f"{all_diffs[len(all_diffs) // 2]:.5f}, 99th percentile {all_diffs[len(all_diffs) * 99 // 100]:.5f}) "
              f"at {worst_at}; {unresolved} ambiguous top entries", file=sys.stderr)
        self.assertGreaterEqual(on_path, MIN_ON_PATH * total, f"{label}: too few positions on the greedy path")

    def test_logprobs_kv_f32_match_transformers(self):
        """The forward pass itself: with an f32 KV cache tandem's logprobs are transformers' to float
        rounding."""
        server = Server(self.folder, "--ctx", "2048", "--max-seqs", "4", "--draft", "none", "--kv-type", "f32")
        try:
            self.against_transformers(server, KV_F32_TOL, "KV f32")
        finally:
            self.assertEqual(server.finish(), 0)

    def test_logprobs_kv_f16_match_transformers(self):
        """As served by default: the KV cache in f16. Some of the prompts (a code prompt with
        special tokens, and the chat ones with a system message, history and non-Latin text):
        the f32 test has the forward pass on all of them, what f16 adds is the cache's rounding."""
        self.against_transformers(self.server, KV_F16_TOL, "KV f16", CODE_PROMPTS[2::3] + CHAT_PROMPTS[1:])

    # -- 2. tokenization, against tokenizers --

    def tokenize_all(self, strings):
        """[(string, tandem's ids, tokenizers' ids)] of the strings where the two differ."""
        bad = []
        for s in strings:
            want = self.tk.encode(s, add_special_tokens=False).ids
            got = self.tandem_ids(s)
            if got != want:
                bad.append((s, got, want))
        return bad

    @staticmethod
    def describe(bad, n=8):
        return "\n".join(f"  {s!r} ({' '.join(f'U+{ord(c):04X}' for c in s[:40])})\n    tandem     {got}\n"
                         f"    tokenizers {want}" for s, got, want in bad[:n])

    def nfc_gap(self, s):
        """Whether tokenizers' NFC of s differs from Unicode 14's (Python's unicodedata):
        tokenizers normalizes with older tables (Unicode 9.0's), so marks added later (U+0D3B,
        U+08D3, U+1AC1-1ACE, U+1E2EC, ...) have combining class 0 there and are not reordered.
        tandem's tables leave out what tokenizers does not know (scripts/gen_unicode_nfc.py)."""
        return self.tk.normalizer.normalize_str(s) != unicodedata.normalize("NFC", s)

    def test_tokenize_matches_tokenizers(self):
        """/tokenize (special tokens matched in the text, as tokenizers' added tokens are) against
        tokenizers' encode, on every string."""
        strings = tokenizer_strings(ARGS.random_strings)
        t0 = time.time()
        bad = self.tokenize_all(strings)
        print(f"\n    tokenized {len(strings)} strings in {time.time() - t0:.1f} s; {len(bad)} differ", file=sys.stderr)
        self.assertGreaterEqual(len(strings), 3000)
        if bad:
            self.fail(f"tandem's /tokenize differs from tokenizers on {len(bad)} of {len(strings)} strings; "
                      f"the first ones:\n{self.describe(bad)}")

    def test_tokenize_marks_newer_than_tokenizers_nfc(self):
        """Text whose NFC differs between tokenizers' Unicode tables (9.0) and Python's (14.0):
        combining marks added since 9.0 after marks of a higher class, compositions added since.
        The folder's tokenizer is what transformers and vLLM run, so tandem follows tokenizers."""
        strings = ["x\u05ae\u0d3c", "a\u035e\u1ac4", "e\U0001e2ed\u0711", "x\u0301\u08d3", "\U00011935\U00011930"]
        strings += [s for s in tokenizer_strings(ARGS.random_strings) if self.nfc_gap(s)]
        self.assertTrue(all(self.nfc_gap(s) for s in strings[:5]), "the probes no longer tell the versions apart")
        bad = self.tokenize_all(strings)
        if bad:
            self.fail(f"tandem's /tokenize differs from tokenizers on {len(bad)} of {len(strings)} strings "
                      f"whose NFC differs between Unicode 9.0 and 14.0; the first ones:\n{self.describe(bad)}")

    def test_detokenize_matches_tokenizers(self):
        """/detokenize of the ids of some of the strings against tokenizers' decode."""
        rng = random.Random(7)
        strings = rng.sample(tokenizer_strings(ARGS.random_strings), 600)
        bad = []
        for s in strings:
            ids = self.tk.encode(s, add_special_tokens=False).ids
            want = self.tk.decode(ids, skip_special_tokens=False)
            got = self.server.post("/detokenize", {"tokens": ids})["content"]
            if got != want:
                bad.append((s, ids, got, want))
        if bad:
            self.fail("tandem's /detokenize differs from tokenizers' decode on {} of {} strings:\n{}".format(
            len(bad), len(strings), "\n".join(f"  {s!r}: ids {ids}\n    tandem     {got!r}\n    tokenizers {want!r}"
                                               for s, ids, got, want in bad[:8])))

    def test_detokenize_byte_fragments(self):
        """Random ids, byte fragments of characters among them: the answer must still be JSON
        (UTF-8), the fragments replaced by U+FFFD as tokenizers' decode does."""
        rng = random.Random(11)
        bad = []
        for _ in range(200):
            ids = [rng.randrange(151643) for _ in range(rng.randint(1, 12))]
            want = self.tk.decode(ids, skip_special_tokens=False)
            raw = self.server.post_raw("/detokenize", {"tokens": ids})
            try:
                got = json.loads(raw.decode("utf-8"))["content"]
            except UnicodeDecodeError as e:
                bad.append((ids, f"not UTF-8 ({e}): {raw!r}", want))
                continue
            if got != want:
                bad.append((ids, repr(got), want))
        if bad:
            self.fail("tandem's /detokenize of {} of 200 random id lists is not tokenizers' decode; the first "
                              "ones:\n{}".format(len(bad), "\n".join(f"  ids {ids}\n    tandem     {got}\n    "
                                                                      f"tokenizers {want!r}" for ids, got, want in bad[:6])))


def generate_json(model, prompt, n, *extra):
    cmd = [ARGS.tandem, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", str(ARGS.threads),
           "--device", ARGS.device, "--json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
    return json.loads(r.stdout)


SPEC_PROMPTS = [
    "def merge_sort(items):",
    "<|im_start|>user\nExplain what a hash map is in two sentences.<|im_end|>\n<|im_start|>assistant\n",
    "The three laws of thermodynamics are",
]


class Speculation(Timed):
    """Greedy with a draft model = greedy alone, with a folder as the target."""

    def check(self, target, draft, prompts, n, *draft_args):
        for prompt in prompts:
            with self.subTest(prompt=prompt):
                alone = generate_json(target, prompt, n, "--draft", "none")
                spec = generate_json(target, prompt, n, "-md", draft, "--draft", "model", "--policy", "fixed",
                                     "--draft-max", "4", "--no-lookup", *draft_args)
                self.assertEqual(spec["prompt_tokens"], alone["prompt_tokens"])
                self.assertEqual(spec["tokens"], alone["tokens"], f"{prompt!r}: with the draft {draft}")
                s = spec["speculative"]
                self.assertGreater(s["drafted_tokens"], 0, s)
                print(f"\n    {os.path.basename(target)} + {os.path.basename(draft)}: {len(spec['tokens'])} tokens, "
                      f"{s['accepted_tokens']}/{s['drafted_tokens']} drafts accepted", end="", file=sys.stderr)
                self.rejected += s["drafted_tokens"] - s["accepted_tokens"]

    def setUp(self):
        super().setUp()
        self.rejected = 0

    def test_folder_target_folder_draft_0_5b(self):
        require("qwen0.5b")
        # The draft is the target's folder re-quantized to Q4_0 as it loads (float matrices stay
        # as stored under the default --draft-type auto), so some of its drafts are rejected.
        self.check(MODEL_DIRS["qwen0.5b"], MODEL_DIRS["qwen0.5b"], SPEC_PROMPTS[1:], 32, "--draft-type", "q4_0")
        self.assertGreater(self.rejected, 0, "the Q4_0 draft never missed: the check proved nothing")

    def test_folder_target_folder_draft_1_5b(self):
        require("qwen0.5b", "qwen1.5b")
        self.check(MODEL_DIRS["qwen1.5b"], MODEL_DIRS["qwen0.5b"], SPEC_PROMPTS[:1], 32)
        self.assertGreater(self.rejected, 0, "the 0.5B draft never missed: the check proved nothing")

    def test_folder_target_gguf_draft(self):
        """A GGUF draft for a folder target: the draft reads the target's token ids, so the
        folder's NFC normalizer (which the GGUF does not record) does not keep them apart."""
        require("qwen0.5b")
        self.check(MODEL_DIRS["qwen0.5b"], gguf_path("qwen0.5b"), SPEC_PROMPTS[1:2], 32)
        self.assertGreater(self.rejected, 0, "the Q4_K_M draft never missed: the check proved nothing")


class OtherArchitectures(Timed):
    """The Llama (SmolLM2: q/k rows permuted at load, a Digits pre-tokenizer) and Gemma 3
    (SentencePiece-style tokenizer.json, norms stored as w for 1 + w, sliding-window layers)
    folders: `tandem generate` greedy (KV cache in f32) against transformers, tie-aware, with
    the prompt's tokens (BOS included) as tokenizers encodes them; and tokenization of the
    strings against tokenizers."""

    TOL = 1e-3  # log-probability: what an f32 KV cache leaves between the two (see Qwen05Folder)
    PROMPTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,",
               "1, 2, 3, 5, 8, 13,"]

    def check(self, key):
        require(key)
        import tokenizers
        folder = MODEL_DIRS[key]
        tk = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        oracle = HfOracle(folder)
        positions = ties = 0
        for prompt in self.PROMPTS:
            r = generate_json(folder, prompt, N_TOKENS, "--draft", "none", "--kv-type", "f32", "--ignore-eos")
            ids = tk.encode(prompt).ids  # with the post-processor's BOS, as transformers encodes
            self.assertEqual(r["prompt_tokens"], ids, f"{key}: prompt tokens of {prompt!r}")
            rows = oracle.rows(ids, r["tokens"])
            for i, token in enumerate(r["tokens"]):
                best = int(rows[i].argmax())
                positions += 1
                if token == best:
                    continue
                lead = float(rows[i][best] - rows[i][token])
                self.assertLess(lead, 2 * self.TOL, f"{key} {prompt!r} position {i}: tandem chose {token}, "
                                f"transformers' argmax {best} leads by {lead:.5f}")
                ties += 1
                break  # past a near tie the continuations may differ
        self.assertGreaterEqual(positions, 0.8 * N_TOKENS * len(self.PROMPTS), f"{key}: too few positions compared")
        print(f"\n    {key}: {positions} positions, {ties} near ties", end="", file=sys.stderr)
        server = Server(folder, "--ctx", "512", "--max-seqs", "2", "--draft", "none")
        try:
            strings = tokenizer_strings(ARGS.random_strings)[::3]
            bad = [(s, got, want) for s in strings
                   for want, got in [(tk.encode(s, add_special_tokens=False).ids,
                                      server.post("/tokenize", {"content": s, "add_special": False})["tokens"])]
                   if got != want]
        finally:
            self.assertEqual(server.finish(), 0)
        if bad:
            self.fail(f"{key}: /tokenize differs from tokenizers on {len(bad)} of {len(strings)} strings; the first "
                      f"ones:\n{Qwen05Folder.describe(bad)}")

    def test_smollm2_llama(self):
        self.check("smollm2")

    def test_gemma3(self):
        self.check("gemma3")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True, help="path to the tandem executable")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="tandem's backend (the tolerances were measured on the CPU)")
    ap.add_argument("--random-strings", type=int, default=2500, help="random strings tokenized (beside the fixed ones)")
    ap.add_argument("--report", action="store_true", help="print each near tie and the largest differences")
    ap.add_argument("-k", dest="pattern", action="append", help="only tests matching this substring")
    ARGS = ap.parse_args()
    ARGS.tandem = os.path.abspath(ARGS.tandem)
    try:
        missing = missing_prerequisite()
        if missing:
            print(missing[1])
            return missing[0]
        loader = unittest.TestLoader()
        if ARGS.pattern:
            loader.testNamePatterns = [f"*{p}*" for p in ARGS.pattern]
        suite = unittest.TestSuite(loader.loadTestsFromTestCase(c)
                                   for c in (Qwen05Folder, Speculation, OtherArchitectures))
        t0 = time.time()
        result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
        print(f"HF model tests took {time.time() - t0:.0f} s")
        return 0 if result.wasSuccessful() else 1
    finally:
        shutil.rmtree(CACHE_DIR, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
