#!/usr/bin/env python3
"""Independent quantization reference for tests/test_quant.cpp.

Quantizes little-endian float32 rows with gguf-py (gguf.quants.quantize, plain numpy) and
writes the raw GGUF blocks. Several jobs per run, so the test pays for one interpreter
start:

  quantize_ref.py TYPE:IN:OUT [TYPE:IN:OUT ...]

TYPE is Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0; IN holds float32 values (a multiple of 32); OUT
receives the blocks. Exits non-zero on any error.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import quantize


def main(jobs):
    if not jobs:
        print(__doc__, file=sys.stderr)
        return 2
    for job in jobs:
        type_name, src, dst = job.split(":", 2)
        values = np.fromfile(src, dtype=np.float32).reshape(1, -1)
        quantize(values, GGMLQuantizationType[type_name]).tofile(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
