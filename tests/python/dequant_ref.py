#!/usr/bin/env python3
"""Independent dequantization reference for tests/test_quant.cpp.

Dequantizes raw GGUF blocks with gguf-py (gguf.quants.dequantize, plain numpy) and
writes little-endian float32. Several jobs per run, so the test pays for one
interpreter start:

  dequant_ref.py TYPE:IN:OUT [TYPE:IN:OUT ...]

TYPE is a GGML type name (F32, F16, BF16, Q4_0, ..., Q6_K); IN holds whole blocks of
that type; OUT receives one float32 per element. Exits non-zero on any error.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize


def main(jobs):
    if not jobs:
        print(__doc__, file=sys.stderr)
        return 2
    for job in jobs:
        type_name, src, dst = job.split(":", 2)
        qtype = GGMLQuantizationType[type_name]
        raw = np.fromfile(src, dtype=np.uint8)
        values = dequantize(raw, qtype).astype(np.float32, copy=False).reshape(-1)
        values.tofile(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
