#!/usr/bin/env python3
"""`tandem chat` in a real terminal: tmux runs it on a pseudo-terminal (so it is interactive:
the banner, the "> " prompt, Ctrl-C as a signal from the terminal), and the test types into it
and reads the screen, as a person would.

Checked: replies stream (the screen grows while a reply is being written, before its
summary line); the conversation is kept (each turn's prompt holds the turns before it);
Ctrl-C stops a reply early and keeps the conversation (the next turn's prompt holds the
stopped reply), at the prompt it quits; /reset clears the conversation.

Exits 77 (skipped, the reason on stdout) when SmolLM2 is outside the run's model set or when
tmux or the model is missing and TANDEM_ALLOW_SKIP=1; missing otherwise, it fails.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "..", "..", "scripts", "models.json")
MODEL_KEY = "smollm2"
SKIP = 77
SUMMARY = re.compile(r"\[prompt (\d+) tokens [^|]*\| reply (\d+) tokens [^|]*\| (\w+)")


def model_path():
    with open(MANIFEST) as f:
        name = json.load(f)["models"][MODEL_KEY]["file"]
    return os.path.join(os.environ.get("TANDEM_MODELS") or os.path.expanduser("~/.cache/tandem/models"), name)


def missing_prerequisite():
    allow_skip = os.environ.get("TANDEM_ALLOW_SKIP") == "1"
    model_set = os.environ.get("TANDEM_TEST_MODELS") or "all"
    keys = [k.strip() for k in model_set.split(",") if k.strip()] if model_set not in ("all", "none") else []
    if model_set != "all" and MODEL_KEY not in keys:
        return SKIP, f"SKIPPED: model '{MODEL_KEY}' is not in this run's model set (TANDEM_TEST_MODELS={model_set})"
    for what, ok, fix in (("model " + model_path(), os.path.exists(model_path()),
                           f"python3 scripts/fetch_models.py --models {MODEL_KEY}"),
                          ("tmux", shutil.which("tmux") is not None, "bash scripts/setup.sh (apt tmux)")):
        if not ok:
            if allow_skip:
                return SKIP, f"SKIPPED: {what} missing; TANDEM_ALLOW_SKIP=1. To test it: {fix}"
            return 1, f"FAILED: {what} missing. Run: {fix} — or set TANDEM_ALLOW_SKIP=1 to skip deliberately"
    return None


class Terminal:
    """One tmux session running a command on a 200×60 pseudo-terminal."""

    def __init__(self, command, env):
        self.name = f"tandem-chat-test-{os.getpid()}"
        self.sock = os.path.join(tempfile.mkdtemp(prefix="tmux-"), "sock")
        self.tmux = ["tmux", "-S", self.sock]
        subprocess.run(self.tmux + ["new-session", "-d", "-s", self.name, "-x", "200", "-y", "60",
                                    " ".join(command) + " ; sleep 30"],
                       check=True, env=env)

    def screen(self):
        out = subprocess.run(self.tmux + ["capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name],
                             capture_output=True, text=True)
        return out.stdout

    def type(self, text):
        subprocess.run(self.tmux + ["send-keys", "-t", self.name, "-l", text], check=True)
        subprocess.run(self.tmux + ["send-keys", "-t", self.name, "Enter"], check=True)

    def ctrl_c(self):
        subprocess.run(self.tmux + ["send-keys", "-t", self.name, "C-c"], check=True)

    def wait(self, predicate, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if predicate(s):
                return s
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}")

    def close(self):
        subprocess.run(self.tmux + ["kill-server"], capture_output=True)


def summaries(screen):
    return [(int(p), int(r), why) for p, r, why in SUMMARY.findall(screen)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    args = ap.parse_args()
    missing = missing_prerequisite()
    if missing:
        print(missing[1])
        return missing[0]
    cache = tempfile.mkdtemp(prefix="tandem-chat-cache-")
    env = dict(os.environ, TANDEM_CACHE=cache, TERM="xterm")
    # Greedy, n-gram speculation, a long reply allowed (the story is stopped by Ctrl-C).
    term = Terminal([args.tandem, "chat", "-m", model_path(), "--temp", "0", "-n", "400", "--draft", "ngram",
                     "-t", "2", "-v"], env)
    t0 = time.time()
    try:
        term.wait(lambda s: "/reset clears the conversation" in s and s.rstrip().endswith(">"), 120, "the banner")

        # 1. A short reply, streamed, and its summary.
        term.type("What is the capital of France? Answer in one sentence.")
        s = term.wait(lambda s: len(summaries(s)) == 1 and s.rstrip().endswith(">"), 120, "the first reply")
        p1, r1, why1 = summaries(s)[0]
        assert r1 > 0, s

        # 2. History: the second turn's prompt holds the first exchange.
        term.type("Repeat my previous question word for word.")
        s = term.wait(lambda s: len(summaries(s)) == 2 and s.rstrip().endswith(">"), 120, "the second reply")
        p2, r2, _ = summaries(s)[1]
        assert p2 > p1 + r1, f"the conversation was not kept: prompt {p2} after {p1} + {r1}\n{s}"

        # 3. Streaming, then Ctrl-C: a long reply grows on the screen before any summary, and
        # Ctrl-C stops it well before its 400 tokens; the chat goes on.
        before = term.screen()
        term.type("Tell me a very long story about a dragon who learns to cook. Make it at least 300 words.")
        lengths = []
        deadline = time.time() + 120
        while time.time() < deadline and len(lengths) < 3:
            s = term.screen()
            if len(summaries(s)) > 2:
                break
            if len(s) > len(before) + 60 and (not lengths or len(s) > lengths[-1]):
                lengths.append(len(s))
            time.sleep(0.15)
        assert len(lengths) >= 3, f"the reply did not stream (screen grew {len(lengths)} times)\n{term.screen()}"
        term.ctrl_c()
        s = term.wait(lambda s: len(summaries(s)) == 3 and s.rstrip().endswith(">"), 60, "the stopped reply")
        p3, r3, why3 = summaries(s)[2]
        assert 0 < r3 < 400, f"Ctrl-C did not stop the reply ({r3} tokens, {why3})\n{s}"
        assert why3 != "length", s

        # 4. The stopped reply is part of the conversation.
        term.type("In one word, what animal was the story about?")
        s = term.wait(lambda s: len(summaries(s)) == 4 and s.rstrip().endswith(">"), 120, "the fourth reply")
        p4, _, _ = summaries(s)[3]
        assert p4 > p3 + r3, f"the stopped reply was dropped: prompt {p4} after {p3} + {r3}\n{s}"

        # 5. /reset: the next prompt is a fresh conversation's, shorter than the last one.
        term.type("/reset")
        term.wait(lambda s: "(conversation cleared)" in s, 30, "the reset")
        term.type("Say hi.")
        s = term.wait(lambda s: len(summaries(s)) == 5 and s.rstrip().endswith(">"), 120, "the reply after /reset")
        p5, _, _ = summaries(s)[4]
        assert p5 < p2, f"/reset kept the conversation: prompt {p5}\n{s}"

        # 6. Ctrl-C at the prompt quits.
        term.ctrl_c()
        term.wait(lambda s: not s.rstrip().endswith(">"), 30, "chat to quit on Ctrl-C at the prompt")
        print(f"chat in tmux: 5 turns, prompts {p1} {p2} {p3} {p4} {p5} tokens, stopped reply {r3} tokens; "
              f"{time.time() - t0:.1f} s")
        return 0
    except AssertionError as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        term.close()
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
