#!/usr/bin/env python3
"""Every CUDA kernel begins with TANDEM_GRID_DEPENDENCY().

With programmatic dependent launch (TANDEM_CUDA_PDL=1, kernels/cuda/simt/simt.hpp) a kernel
may start while the kernel before it on the stream is still running; it waits for that one's
results in its first statement. A kernel that read its inputs before the wait would race
with the kernel that writes them: on the device only, and only with the option on, where
the emulator (whose launches run one after another) cannot show it. So this holds the kernel
sources to the rule instead.

  cuda_kernel_prologue.py [SOURCE_DIR]
"""
import glob
import os
import re
import sys


def kernels(text):
    """(name, first statement) of each __global__ function definition in text."""
    for m in re.finditer(r"__global__", text):
        i, depth = m.end(), 0
        while i < len(text):
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif depth == 0 and c in "{;":
                break
            i += 1
        if i >= len(text) or text[i] == ";":
            continue  # a declaration
        sig = text[m.end():i]
        name = re.findall(r"(\w+)\s*\(", sig)
        body = text[i + 1:]
        first = body.lstrip().split(";", 1)[0].strip() + ";"
        yield (name[-1] if name else "?"), first


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad, n = [], 0
    for f in sorted(glob.glob(os.path.join(root, "kernels", "cuda", "**", "*.cu*"), recursive=True)):
        for name, first in kernels(open(f).read()):
            n += 1
            if first != "TANDEM_GRID_DEPENDENCY();":
                bad.append(f"{os.path.relpath(f, root)}: {name} begins with {first!r}")
    if n == 0:
        print("no kernels found under kernels/cuda", file=sys.stderr)
        return 1
    for b in bad:
        print(b, file=sys.stderr)
    print(f"{n} kernels, {len(bad)} without TANDEM_GRID_DEPENDENCY() first")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
