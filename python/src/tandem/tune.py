"""tandem.tune: measure speculative decoding on this machine and get a recommended configuration.

The measuring (a cost-model calibration, then every policy × draft length × temperature
against plain decoding) is the `tandem tune` command's (apps/tune/); this runs the CLI the
package ships and returns its JSON report, rather than re-implementing it over the C API.
`python -m tandem.tune ARGS...` passes ARGS to `tandem tune` unchanged.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from .errors import TandemError

CLI_ENV = "TANDEM_CLI"  # a `tandem` executable to use instead of the packaged one


def cli_path() -> str:
    """The `tandem` executable: $TANDEM_CLI, the one in this package, or one on PATH."""
    explicit = os.environ.get(CLI_ENV)
    if explicit:
        return explicit
    packaged = pathlib.Path(__file__).resolve().parent / "_bin" / "tandem"
    if packaged.exists():
        return str(packaged)
    found = shutil.which("tandem")
    if found:
        return found
    raise TandemError(f"the tandem CLI was not found (not packaged, not on PATH); set {CLI_ENV}")


def _list(v: str | float | Sequence[float] | Sequence[str]) -> str:
    if isinstance(v, (str, int, float)):
        return str(v)
    return ",".join(str(x) for x in v)


def tune(model: str | os.PathLike[str], draft: str | os.PathLike[str] = "ngram", *,
         draft_max: str | Sequence[int] = "1..8", temps: Sequence[float] | str = (0.0, 0.7),
         policies: Sequence[str] | str = ("fixed", "adaptive"), max_tokens: int = 64, reps: int = 1,
         prompts: str | os.PathLike[str] | None = None, write_config: str | os.PathLike[str] | None = None,
         threads: int = 0, device: str = "auto", extra_args: Sequence[str] = (),
         timeout: float | None = None) -> dict[str, Any]:
    """Runs `tandem tune` and returns its report (the JSON `--out` writes: the measured
    configurations and a recommendation per temperature). `draft` is a draft model's GGUF
    or "ngram". `write_config` also writes the config file `tandem generate --config` reads.
    A failure (bad option, unreadable model) raises TandemError with the CLI's message."""
    out = tempfile.NamedTemporaryFile(prefix="tandem-tune-", suffix=".json", delete=False)
    out.close()
    # The report is read from --out, not stdout: the CLI's log lines may go to stdout too.
    cmd = [cli_path(), "tune", "-m", os.fspath(model), "--json", "--quiet", "--out", out.name,
           "--draft-max", _list(draft_max) if not isinstance(draft_max, str) else draft_max,
           "--temps", _list(temps), "--policies", _list(policies), "-n", str(max_tokens), "--reps", str(reps),
           "-t", str(threads), "--device", device]
    if os.fspath(draft) == "ngram":
        cmd += ["--draft", "ngram"]
    else:
        cmd += ["--draft", "model", "--model-draft", os.fspath(draft)]
    if prompts is not None:
        cmd += ["--prompts", os.fspath(prompts)]
    if write_config is not None:
        cmd += ["--write-config", os.fspath(write_config)]
    cmd += list(extra_args)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            message = proc.stderr.strip() or proc.stdout.strip() or "no message"
            raise TandemError(f"tandem tune failed (exit status {proc.returncode}): {message}")
        text = pathlib.Path(out.name).read_text(encoding="utf-8")
        try:
            report: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as e:
            raise TandemError(f"tandem tune wrote no JSON report: {e}: {text[:200]!r}") from e
        return report
    finally:
        os.unlink(out.name)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m tandem.tune ARGS`: `tandem tune ARGS` with the packaged CLI."""
    args = list(sys.argv[1:] if argv is None else argv)
    return subprocess.call([cli_path(), "tune", *args])


if __name__ == "__main__":
    sys.exit(main())
