"""What the speculative benchmarks on the real Qwen pair share: where the models are, the
ChatML wrapping of a prompt, the command-line options naming the binary, models and
threads, and one `tandem generate --json` run parsed."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.environ.get("TANDEM_MODELS", os.path.expanduser("~/.cache/tandem/models"))
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def add_pair_args(ap):
    """--tandem, --target, --draft and -t/--threads, with the pair's defaults."""
    ap.add_argument("--tandem", default=os.path.join(ROOT, "build", "release", "apps", "tandem"))
    ap.add_argument("--target", default=os.path.join(MODELS, TARGET))
    ap.add_argument("--draft", default=os.path.join(MODELS, DRAFT))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())


def missing_paths(a):
    """The binary or model files of parsed args a that do not exist."""
    return [p for p in (a.tandem, a.target, a.draft) if not os.path.exists(p)]


def tandem_json(cmd):
    """Runs a `tandem generate ... --json` command; its JSON object."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tandem failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


def prompt_sets(names, limit, path=None):
    """Prompt sets by name, at most `limit` each, in ChatML: the categories of prompts.jsonl
    (code, chat, summarise) and "edit" (prompts_edit.jsonl); or, with `path` and names None,
    every category of that JSON-lines file (limit None: all)."""
    sets = {n: [] for n in names} if names is not None else {}
    with open(path or os.path.join(HERE, "prompts.jsonl")) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                cat = r.get("category", "other")
                if names is None:
                    sets.setdefault(cat, [])
                if cat in sets:
                    sets[cat].append(CHATML.format(r["prompt"]))
    if path is None and "edit" in sets:
        with open(os.path.join(HERE, "prompts_edit.jsonl")) as f:
            for line in f:
                if line.strip():
                    sets["edit"].append(json.loads(line)["prompt"])  # already in ChatML
    return {n: p[:limit] for n, p in sets.items() if p}
