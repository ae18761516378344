// Read-only access to GGUF model files (versions 2 and 3, little-endian) through a
// memory mapping. Everything in the file is validated when it is opened: every length,
// count, offset and size is checked against the bytes that remain before anything is
// allocated or read, so a corrupt or hostile file produces a gguf::Error naming the file
// and the problem, never a crash or a huge allocation. Tensor data is not copied:
// tensor_data() points into the mapping, which lives as long as the File.
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

namespace tandem::gguf {

// Every message starts with the file path and says what is wrong.
class Error : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

// Metadata value types, numbered as the GGUF format numbers them on disk.
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8,
  UINT16,
  INT16,
  UINT32,
  INT32,
  FLOAT32,
  BOOL,
  STRING,
  ARRAY,
  UINT64,
  INT64,
  FLOAT64,
};

// "UINT8", "STRING", ... or "unknown(N)" for an id outside the enum.
std::string value_type_name(uint32_t id);
inline std::string value_type_name(ValueType t) { return value_type_name(static_cast<uint32_t>(t)); }

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> dims;  // dims[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;        // relative to the start of the data section
  size_t nbytes = 0;          // size of the data in the file
  int64_t numel() const;
};

class File {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  // Limits that only a corrupt file exceeds; they keep allocation bounded.
  static constexpr uint64_t kMaxTensors = 1'000'000;
  static constexpr uint64_t kMaxKeys = 1'000'000;
  static constexpr int kMaxArrayDepth = 8;  // nesting of arrays within arrays
  static constexpr uint32_t kMaxDims = 4;

  // Maps and validates the file. Throws Error.
  static std::unique_ptr<File> open(const std::string& path);
  // Validates GGUF bytes already in memory, with the same checks as open(); the File reads
  // them in place (no copy), so they must outlive it. `name` stands for the path in errors.
  // For the fuzz harness and callers that hold a model in memory.
  static std::unique_ptr<File> from_memory(const void* data, size_t size, const std::string& name = "<memory>");

  // A tensor held outside the File's bytes: a model stored in another format (a Hugging Face
  // folder's safetensors shards) presented as GGUF. `releasable`: the bytes are a read-only
  // private file mapping, which release() may drop (they fault back in from the file).
  struct ExternalTensor {
    std::string name;
    DType type = DType::F32;
    std::vector<int64_t> dims;  // dims[0] innermost
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
    bool releasable = false;
  };
  // Metadata from GGUF bytes without tensors (a gguf::Writer's, taken over), tensors from
  // elsewhere; `owner` keeps their memory alive as long as the File. Each tensor is checked
  // as open() checks one (known weight type, dims, whole blocks, exact byte count, unique
  // name). `name` stands for the path in errors. Throws Error.
  static std::unique_ptr<File> assemble(const std::string& name, std::vector<uint8_t> metadata,
                                        std::vector<ExternalTensor> tensors, std::shared_ptr<const void> owner);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_start_; }  // absolute start of the data section

  // ---- metadata ----------------------------------------------------------------
  bool has(std::string_view key) const;
  ValueType type_of(std::string_view key) const;  // throws Error if missing
  // For an ARRAY: the element type (throws Error if missing or not an array).
  ValueType array_type_of(std::string_view key) const;

  // The getters return nullopt when the key is absent and throw Error when the value
  // has an incompatible type or does not fit the result.
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type, BOOL
  std::optional<double> get_float(std::string_view key) const;  // FLOAT32/64, integers
  std::optional<bool> get_bool(std::string_view key) const;     // BOOL
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;  // float or int elements
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;  // integer or bool elements
  size_t array_size(std::string_view key) const;  // 0 if missing or not an array
  std::vector<std::string> keys() const;          // in file order
  // One-line rendering for dumps: strings quoted and escaped, arrays cut after
  // max_array_items elements with the total count shown.
  std::string value_to_string(std::string_view key, size_t max_array_items = 8) const;
  // general.architecture; throws Error if missing or not a string.
  std::string architecture() const;

  // ---- tensors -----------------------------------------------------------------
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent
  // Start of the tensor's bytes inside the mapping (valid while the File lives).
  const uint8_t* tensor_data(const TensorInfo& t) const;
  // The tensor's bytes now live elsewhere (a backend's packed or re-quantized copy) and will
  // not be read through the mapping again: the whole pages inside them leave the process's
  // resident memory (madvise MADV_DONTNEED), so a tiled model does not hold its weights
  // twice. Reading them later stays correct, only slower: the mapping is read-only and
  // private, so a read faults the file's bytes back in. Nothing for a from_memory File.
  void release(const TensorInfo& t) const;

 private:
  struct Kv {
    std::string key;
    ValueType type;
    uint64_t pos;          // offset of the value bytes (for ARRAY: of the first element)
    ValueType elem_type;   // ARRAY only
    uint64_t count;        // ARRAY only
  };
  File();
  void parse();
  const Kv* find(std::string_view key) const;
  const Kv& require(std::string_view key) const;
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<MappedFile> mapping_;  // open(): base_ is its data; from_memory(): none
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  size_t data_start_ = 0;
  std::vector<Kv> kvs_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  // assemble(): the metadata bytes, each tensor's memory (TensorInfo::offset indexes it) and
  // what keeps it alive.
  std::vector<uint8_t> owned_bytes_;
  std::vector<ExternalTensor> external_;
  std::shared_ptr<const void> external_owner_;
};

}  // namespace tandem::gguf
