#!/usr/bin/env python3
"""What nvcc makes of the hot kernels, checked without a GPU.

The emulator runs a kernel's arithmetic, not its code generation: a thread array indexed by
a variable, or a kernel argument whose address is taken (a MatmulGroup indexed by the
block's matrix), lands in local memory, which is global memory behind L1. A decode matmul
that copies its 440-byte argument struct to local memory in every thread, or keeps its
accumulators there inside the k loop, still gives the right bits and runs several times
slower on a GPU. This reads ptxas' report of the build's own compilation of the kernel files
(-Xptxas -v; cmake/nvcc_resource_report.sh keeps it beside each object as <object>.ptxas)
and holds every kernel's sm_90 code (the H100 and H200 the device check runs on) to a ceiling
on its stack frame and spills; the other architectures' kernels over the ceilings are
printed, not held (sm_80 gives some kernels fewer registers: attention spills a few words
there). The ceilings leave room for what the kernels keep there on purpose: a tile's results
on their way out through the q/k/v epilogue (at most 176 bytes), double-precision sin/cos's
reduction (40 bytes). The files whose kernels need none are held to none.

  cuda_device_resources.py --reports DIR

DIR: the folder of the build's kernel objects (CMakeFiles/tandem_cuda_device.dir/ops).
"""
import argparse
import os
import re
import sys

# The kernel files (kernels/cuda/ops) the model's passes spend their time in.
FILES = ["matmul_small.cu", "matmul_mma.cu", "matmul_mma_float.cu", "paged_attention.cu", "rms_norm_quant.cu",
         "attn_inputs.cu", "gated_act.cu", "rope.cu", "kv_store.cu", "get_rows.cu", "greedy.cu", "sampling.cu",
         "top_rows.cu", "mask_rows.cu", "logprob_rows.cu"]
ARCH = "sm_90"    # the code held to the ceilings
MAX_STACK = 192  # bytes of local memory a thread
MAX_SPILL = 64   # bytes of spill stores plus loads
# Files whose kernels keep nothing in local memory on purpose: any stack there is an array
# indexed at run time (attention's staged loads unpacked by a variable index were one).
NO_STACK = {"paged_attention.cu", "rms_norm_quant.cu", "gated_act.cu", "kv_store.cu", "get_rows.cu", "greedy.cu",
            "sampling.cu", "top_rows.cu", "mask_rows.cu", "logprob_rows.cu"}


def read_report(reports, f):
    path = os.path.join(reports, f + ".o.ptxas")
    if not os.path.exists(path):
        sys.exit(f"no ptxas report {path}: build the tandem_cuda_device target (the nvcc build) first; "
                 f"an object compiled before the report was kept is rebuilt by touching {f}")
    with open(path) as fh:
        return fh.read()


def kernels(report):
    """(kernel, architecture, registers, stack, spill stores, spill loads) of every entry function."""
    name, arch, out = None, None, []
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            name, arch = m.group(1), m.group(2)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            out.append([name, arch, None, int(m.group(1)), int(m.group(2)), int(m.group(3))])
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and out and out[-1][0] == name and out[-1][2] is None:
            out[-1][2] = int(m.group(1))
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
    ap.add_argument("--reports", required=True)
    args = ap.parse_args()
    bad, others, n = [], [], 0
    for f in FILES:
        every = kernels(read_report(args.reports, f))
        rows = [r for r in every if r[1] == ARCH]
        if not rows:
            sys.exit(f"no {ARCH} kernels reported for {f}: did ptxas' report change its wording, or the "
                     f"build's architectures (CMAKE_CUDA_ARCHITECTURES) leave {ARCH} out?")
        worst = max(rows, key=lambda r: (r[3], r[4] + r[5]))
        print(f"{f:22s} {len(rows):4d} kernels; largest stack {worst[3]:4d} B, spills {worst[4]}+{worst[5]} B "
              f"({short(worst[0])}, {worst[2]} registers)")
        max_stack = 0 if f in NO_STACK else MAX_STACK
        for name, arch, regs, stack, st, ld in every:
            over = stack > max_stack or st + ld > MAX_SPILL
            what = f"{f}: {short(name)} ({arch}): {stack} B stack frame, {st} B spill stores, {ld} B spill loads, " \
                   f"{regs} registers"
            if arch == ARCH:
                n += 1
                if over:
                    bad.append(what)
            elif over:
                others.append(what)
    if others:
        print("\nover the ceilings in other architectures' code (printed, not held):")
        for o in others:
            print("  " + o)
    if bad:
        print(f"\n{len(bad)} kernels over the ceilings ({MAX_STACK} B of stack, none in {', '.join(sorted(NO_STACK))}; "
              f"{MAX_SPILL} B of spills):")
        for b in bad:
            print("  " + b)
        print("A thread array indexed by a variable (a loop over tiles whose trip count is not a constant), or "
              "an argument struct indexed by a variable without const __grid_constant__, is the usual cause.")
        return 1
    print(f"{n} {ARCH} kernels within {MAX_STACK} B of stack (none where none is needed) and {MAX_SPILL} B of spills")
    return 0


if __name__ == "__main__":
    sys.exit(main())
