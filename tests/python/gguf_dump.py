#!/usr/bin/env python3
"""Dumps a GGUF file with the reference reader (gguf-py's GGUFReader) in a line format
that tests/support/gguf_dump.cpp produces from tandem's reader, so the two can be
compared byte for byte. Strings are hex (no escaping questions), floats are their bit
patterns (no formatting questions), tensors carry a CRC-32 of their data.

  version <n>
  alignment <n>
  data_offset <n>
  kv <key hex> <type[,elem type...]> <count> <value>...   (nested arrays flattened)
  tensor <name hex> <ggml type id> <dims, innermost first> <absolute offset> <nbytes> <crc32>
"""
import sys
import zlib

import numpy as np
from gguf import GGUFReader, GGUFValueType


def fmt(part, vtype):
    if vtype == GGUFValueType.STRING:
        return "s:" + bytes(part).hex()
    if vtype == GGUFValueType.FLOAT32:
        return "f:%08x" % int(part.view(np.uint32)[0])
    if vtype == GGUFValueType.FLOAT64:
        return "d:%016x" % int(part.view(np.uint64)[0])
    if vtype == GGUFValueType.BOOL:
        return str(int(bool(part[0])))
    return str(int(part[0]))


def main(path):
    r = GGUFReader(path)
    out = []
    out.append("version %d" % int(r.fields["GGUF.version"].parts[0][0]))
    out.append("alignment %d" % int(r.alignment))
    out.append("data_offset %d" % int(r.data_offset))
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        vtype = field.types[-1]
        values = [fmt(field.parts[i], vtype) for i in field.data]
        types = ",".join(t.name for t in field.types)
        out.append(" ".join(["kv", name.encode().hex(), types, str(len(values))] + values))
    for t in r.tensors:
        raw = bytes(np.asarray(r.data[t.data_offset:t.data_offset + t.n_bytes]))
        dims = ",".join(str(int(d)) for d in t.shape)
        out.append("tensor %s %d %s %d %d %08x" % (t.name.encode().hex(), int(t.tensor_type), dims,
                                                   t.data_offset, t.n_bytes, zlib.crc32(raw)))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
