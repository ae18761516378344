// A whole file mapped read-only and private: how the model readers (GGUF here, safetensors in
// engine/hf) hold weights without copying them. Pages are read from the file on first touch
// and can be dropped again (release_pages), to fault back in from the file if read later.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace tandem {

class MappedFile {
 public:
  // Throws std::runtime_error "<path>: cannot open|stat|map ...: <reason>" or "not a regular file".
  static std::unique_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }
  // Drops the whole pages inside [p, p + n), which must lie in a read-only private file
  // mapping, from the process's resident memory.
  static void release_pages(const uint8_t* p, size_t n);

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem
