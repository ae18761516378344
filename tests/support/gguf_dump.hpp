// Compares tandem's GGUF reader with the reference reader (gguf-py): both render a file
// in the line format documented in tests/python/gguf_dump.py.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/gguf/gguf.hpp"

namespace tandem::test {

// tandem's view of the file. Arrays of arrays are rendered as "kv <key hex> nested"
// (gguf-py flattens them; tests compare those keys separately).
std::string gguf_dump(const gguf::File& f);
// gguf-py's view of the file at `path`; returns false (and the output so far) if the
// script fails.
bool gguf_dump_python(const std::string& path, std::string* out);
// CRC-32 as zlib.crc32 computes it.
uint32_t crc32(const uint8_t* p, size_t n);
std::string hex(std::string_view bytes);

}  // namespace tandem::test
