// Read-only access to safetensors files (Hugging Face's weight format) through a memory
// mapping: an 8-byte little-endian header length, a JSON header naming every tensor's dtype,
// shape and [begin, end) byte range in the data that follows, then the data.
//
// Everything is validated when the file is opened, as the GGUF reader does: the header length
// against the file, the JSON, every dtype, shape and range (inside the data, exactly the bytes
// the shape needs, no two tensors overlapping), so a truncated or hostile file gives an
// st::Error naming the file and the problem, never a crash or a huge allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem {
class MappedFile;
}

namespace tandem::st {

class Error : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

// The element types the format defines. Only F32, F16 and BF16 are weights tandem computes
// with; the others are read (a header naming them is valid) and refused where used.
enum class Dtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

std::optional<Dtype> parse_dtype(std::string_view s);
const char* dtype_name(Dtype t);
size_t dtype_size(Dtype t);
// The engine's type for a float dtype; nullopt for the others.
std::optional<DType> engine_type(Dtype t);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<int64_t> shape;  // row-major, as PyTorch: shape.back() is the contiguous dimension
  uint64_t begin = 0, end = 0;  // byte range relative to the start of the data
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(end - begin); }
};

class File {
 public:
  // A header larger than this is not a weight file (real ones are well under 1 MiB).
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
  static constexpr size_t kMaxDims = 8;

  static std::unique_ptr<File> open(const std::string& path);  // throws Error
  // The same checks on bytes in memory, read in place (they must outlive the File).
  static std::unique_ptr<File> from_memory(const void* data, size_t size, const std::string& name = "<memory>");
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find(std::string_view name) const;                 // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const uint8_t* data(const TensorInfo& t) const;
  bool mapped() const { return mapping_ != nullptr; }  // open(): a file mapping release may drop

 private:
  File();
  void parse();
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<MappedFile> mapping_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tandem::st
