#!/usr/bin/env python3
"""Checks that dependencies in tandem's library code only point down the layers.

Every source file of the library belongs to one component (a folder, or one public header),
and every component to a layer (docs/architecture.md explains them):

  0 kernels   1 base   2 gguf, sampling   3 text, kv, hf   4 chat, model
  5 draft, verify, policies   6 runtime   7 api   8 apps

A file may include files of its own component and of components on LOWER layers only: not
a component beside it on the same layer, nor one above. The CMake components
(tandem_component in engine/CMakeLists.txt) are held to the same rule: DEPS and
PRIVATE_DEPS name only targets below. Tests, benchmarks and examples may include anything.

Exit status 1 lists every violation. --pretend 'PATH:#include "X"' adds a virtual line to
a file first: the test suite uses it to show that an upward include is caught.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (path or folder prefix, component, layer); the longest matching prefix wins.
COMPONENTS = [
    ("kernels/", "kernels", 0),
    ("include/tandem/export.h", "base", 1),
    ("include/tandem/version.hpp", "base", 1),
    ("include/tandem/sampling.hpp", "base", 1),
    ("include/tandem/speculative.hpp", "base", 1),
    ("include/tandem/generation.hpp", "base", 1),
    ("engine/base/", "base", 1),
    ("engine/gguf/", "gguf", 2),
    ("engine/sampling/", "sampling", 2),
    ("engine/grammar/", "grammar", 2),
    ("engine/text/", "text", 3),
    ("engine/kv/", "kv", 3),
    ("engine/hf/", "hf", 3),
    ("engine/chat/", "chat", 4),
    ("engine/model/", "model", 4),
    ("draft/", "draft", 5),
    ("verify/", "verify", 5),
    ("policies/", "policies", 5),
    ("engine/runtime/", "runtime", 6),
    ("include/tandem/engine.hpp", "runtime", 6),
    ("engine/api/", "api", 7),
    ("include/tandem/tandem.h", "api", 7),
    ("apps/", "apps", 8),
]
SCANNED = ["kernels", "engine", "draft", "verify", "policies", "include", "apps"]
SOURCE_SUFFIXES = {".hpp", ".cpp", ".h", ".c", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def component_of(rel):
    best = None
    for prefix, comp, layer in COMPONENTS:
        if (rel == prefix or (prefix.endswith("/") and rel.startswith(prefix))) and (
                best is None or len(prefix) > len(best[0])):
            best = (prefix, comp, layer)
    return None if best is None else (best[1], best[2])


def resolve(including, target):
    """The repository path an #include "target" in `including` names (None: not ours)."""
    for base in (pathlib.Path(including).parent, pathlib.Path("."), pathlib.Path("include")):
        cand = (base / target).as_posix()
        if (ROOT / cand).is_file():
            return pathlib.PurePosixPath(cand).as_posix()
    return None


def check_includes(extra):
    errors = []
    files = {}
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*")):
            if p.is_file() and p.suffix in SOURCE_SUFFIXES:
                files[p.relative_to(ROOT).as_posix()] = p.read_text(encoding="utf-8", errors="replace").splitlines()
    for rel, line in extra:
        files.setdefault(rel, []).append(line)
    for rel, lines in files.items():
        me = component_of(rel)
        if me is None:
            errors.append(f"{rel}: in no component: add its folder to scripts/check_layers.py")
            continue
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(rel, m.group(1))
            if target is None:
                continue  # a system or generated header
            other = component_of(target)
            if other is None or other[0] == me[0]:
                continue
            if other[1] >= me[1]:
                where = "above" if other[1] > me[1] else "beside"
                errors.append(f"{rel}:{n}: {me[0]} (layer {me[1]}) includes {target}, of {other[0]} "
                              f"(layer {other[1]}, {where} it)")
    return errors


def check_cmake():
    """tandem_component(<target> DIRS <dirs> DEPS <targets> ...) in engine/CMakeLists.txt."""
    text = (ROOT / "engine/CMakeLists.txt").read_text()
    calls = re.findall(r"tandem_component\(([^)]*)\)", text)
    # The backends' targets (kernels/, kernels/cuda/) are all of layer 0.
    layer_of_target = {t: ("kernels", 0) for t in ("tandem_kernels", "tandem_backends", "tandem_cuda_arena",
                                                  "tandem_cuda_emulated", "tandem_cuda_device")}
    deps_of = {}
    for call in calls:
        words = call.split()
        name, section, dirs, deps = words[0], None, [], []
        for w in words[1:]:
            if w in ("DIRS", "DEPS", "PRIVATE_DEPS"):
                section = w
            elif section == "DIRS":
                dirs.append(w)
            elif section in ("DEPS", "PRIVATE_DEPS"):
                deps.append(w)
        comps = {component_of(d.rstrip("/") + "/") for d in dirs}
        if len(comps) != 1 or None in comps:
            return [f"engine/CMakeLists.txt: {name} spans {sorted(map(str, comps))}: one component per target"]
        layer_of_target[name] = comps.pop()
        deps_of[name] = deps
    errors = []
    for name, deps in deps_of.items():
        me = layer_of_target[name]
        for d in deps:
            if not d.startswith("tandem_"):
                continue  # an external library
            other = layer_of_target.get(d)
            if other is None:
                errors.append(f"engine/CMakeLists.txt: {name} links {d}, which is not a component")
            elif other[1] >= me[1]:
                errors.append(f"engine/CMakeLists.txt: {name} (layer {me[1]}) links {d} (layer {other[1]})")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pretend", action="append", default=[], metavar='PATH:LINE',
                    help='treat LINE as part of the file PATH (relative to the repository)')
    args = ap.parse_args()
    extra = []
    for p in args.pretend:
        rel, _, line = p.partition(":")
        extra.append((rel, line))
    errors = check_includes(extra) + check_cmake()
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} dependency violation(s): see docs/architecture.md for the layers")
        return 1
    print("layers: every include and every component's link points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
