#!/usr/bin/env python3
"""What nvcc makes of the hot kernels, checked without a GPU.

The emulator runs a kernel's arithmetic, not its code generation: a thread array indexed by
a variable, or a kernel argument whose address is taken (a MatmulGroup indexed by the
block's matrix), lands in local memory, which is global memory behind L1. A decode matmul
that copies its 440-byte argument struct to local memory in every thread, or keeps its
accumulators there inside the k loop, still gives the right bits and runs several times
slower on a GPU. This compiles the kernel files for sm_90 with ptxas' report (-Xptxas -v;
device code only, -cubin) and holds every kernel to a ceiling on its stack frame and
spills. The ceilings leave room for what the kernels keep there on purpose: a tile's
results on their way out through the q/k/v epilogue (at most 176 bytes), double-precision
sin/cos's reduction (40 bytes). The files whose kernels need none are held to none.

  cuda_device_resources.py --nvcc NVCC --source SRC --out DIR --flags="FLAG;FLAG"

--flags: the build's nvcc flags that shape the device code (CMake's TANDEM_CUDA_CODE_FLAGS,
a CMake list), so that the kernels are compiled here as the build compiles them.
"""
import argparse
import os
import re
import subprocess
import sys

# The kernel files (kernels/cuda/ops) the model's passes spend their time in.
FILES = ["matmul_small.cu", "matmul_mma.cu", "matmul_mma_float.cu", "paged_attention.cu", "rms_norm_quant.cu",
         "attn_inputs.cu", "gated_act.cu", "rope.cu", "kv_store.cu", "get_rows.cu", "greedy.cu", "sampling.cu",
         "top_rows.cu"]
MAX_STACK = 192  # bytes of local memory a thread
MAX_SPILL = 64   # bytes of spill stores plus loads
# Files whose kernels keep nothing in local memory on purpose: any stack there is an array
# indexed at run time (attention's staged loads unpacked by a variable index were one).
NO_STACK = {"paged_attention.cu", "rms_norm_quant.cu", "gated_act.cu", "kv_store.cu", "get_rows.cu", "greedy.cu",
            "sampling.cu", "top_rows.cu"}


def compile_report(nvcc, flags, src, path, out):
    cmd = [nvcc, "-cubin", "-arch=sm_90", "-O3", "-DNDEBUG", "-std=c++17", *flags,
           f"-I{src}", "-DTANDEM_CUDA_EMULATED_BUILD=0", "-DTANDEM_CUDA_NS=cuda_dev", "-Xptxas", "-v",
           path, "-o", os.path.join(out, os.path.basename(path) + ".cubin")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"nvcc failed on {path}:\n{r.stderr}")
    return r.stderr


def kernels(report):
    """(kernel, registers, stack, spill stores, spill loads) of every entry function."""
    name, out = None, []
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            out.append([name, None, int(m.group(1)), int(m.group(2)), int(m.group(3))])
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and out and out[-1][0] == name and out[-1][1] is None:
            out[-1][1] = int(m.group(1))
            name = None
    return out


def short(mangled):
    """The kernel's name and template arguments: matmul_mma_pair_kernel<12, 14>."""
    found = None
    for m in re.finditer(r"\d+", mangled):  # a mangled name is its length, then itself (the
        for i in range(m.start(), m.end()):  # length may follow a hash's last digits)
            name = mangled[m.end():m.end() + int(mangled[i:m.end()])]
            if name[:1].isalpha() and name.endswith("_kernel"):
                args = re.findall(r"L[ib](\d+)E", mangled[m.end() + len(name):])
                found = name + (f"<{', '.join(args)}>" if args else "")
    return found or mangled


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--flags", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    bad, n = [], 0
    for f in FILES:
        rows = kernels(compile_report(args.nvcc, [x for x in args.flags.split(";") if x], args.source,
                                      os.path.join(args.source, "kernels/cuda/ops", f), args.out))
        if not rows:
            sys.exit(f"no kernels reported for {f}: did ptxas' report change its wording?")
        worst = max(rows, key=lambda r: (r[2], r[3] + r[4]))
        print(f"{f:22s} {len(rows):4d} kernels; largest stack {worst[2]:4d} B, spills {worst[3]}+{worst[4]} B "
              f"({short(worst[0])}, {worst[1]} registers)")
        max_stack = 0 if f in NO_STACK else MAX_STACK
        for name, regs, stack, st, ld in rows:
            n += 1
            if stack > max_stack or st + ld > MAX_SPILL:
                bad.append(f"{f}: {short(name)}: {stack} B stack frame, {st} B spill stores, {ld} B spill loads, "
                           f"{regs} registers")
    if bad:
        print(f"\n{len(bad)} kernels over the ceilings ({MAX_STACK} B of stack, none in {', '.join(sorted(NO_STACK))}; "
              f"{MAX_SPILL} B of spills):")
        for b in bad:
            print("  " + b)
        print("A thread array indexed by a variable (a loop over tiles whose trip count is not a constant), or "
              "an argument struct indexed by a variable without const __grid_constant__, is the usual cause.")
        return 1
    print(f"{n} kernels within {MAX_STACK} B of stack (none where none is needed) and {MAX_SPILL} B of spills")
    return 0


if __name__ == "__main__":
    sys.exit(main())
