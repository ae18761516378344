// Opening a GGUF file: mapping it and validating the header, the metadata and the tensor
// table. The rule throughout: a count, length or offset read from the file is compared
// with the bytes that remain (by division, so nothing overflows) before it is used to
// allocate, loop or index. After parse() succeeds every metadata value and tensor range
// is known to lie inside the mapping, so the getters can read without further checks.
#include <cstring>
#include <limits>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_bytes.hpp"
#include "engine/gguf/mapped_file.hpp"

namespace tandem::gguf {
namespace {

using detail::load;
using detail::quoted;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kMaxKeyLength = 65535;  // the GGUF spec's limit on key length

// Smallest possible encodings, used to bound counts before looping over them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key len, 1-byte key, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, one dim, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;                   // element type + count

bool is_dtype_enumerator(uint32_t id) {
  switch (static_cast<DType>(id)) {
    case DType::F32:
    case DType::F16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q8_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q8_K:
    case DType::I8:
    case DType::I16:
    case DType::I32:
    case DType::I64:
    case DType::F64:
    case DType::BF16: return true;
  }
  return false;
}

// Bounds-checked reader over the mapping. Every error it raises starts with the path.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, size_t size) : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const { throw Error(path_ + ": " + what); }

  // `what` names the item being read; it is only evaluated on failure.
  template <class What>
  void need(uint64_t n, const What& what) const {
    if (n > left())
      fail("truncated file: " + std::string(what()) + " at offset " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, only " + std::to_string(left()) + " left");
  }

  template <class T, class What>
  T read(const What& what) {
    need(sizeof(T), what);
    T v = load<T>(base_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  template <class What>
  void skip(uint64_t n, const What& what) {
    need(n, what);
    pos_ += n;
  }

  // A length-prefixed string; the length is checked before anything is copied.
  template <class What>
  std::string_view read_string(const What& what) {
    const uint64_t len = read<uint64_t>([&] { return "length of " + std::string(what()); });
    if (len > left())
      fail("truncated file: " + std::string(what()) + " has length " + std::to_string(len) + " at offset " +
           std::to_string(pos_) + ", only " + std::to_string(left()) + " bytes left");
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

  const uint8_t* here() const { return base_ + pos_; }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  uint64_t pos_ = 0;
};

// Skips over (and validates) metadata values. Recursion is bounded by kMaxArrayDepth.
class ValueSkipper {
 public:
  ValueSkipper(Cursor& c, std::string_view key) : c_(c), key_(key) {}

  std::string what() const { return "value of metadata key " + quoted(key_); }

  uint32_t read_type(const char* role) {
    const uint32_t t = c_.read<uint32_t>([&] { return std::string(role) + " of metadata key " + quoted(key_); });
    if (!detail::is_value_type(t))
      c_.fail("metadata key " + quoted(key_) + " has " + role + " " + value_type_name(t));
    return t;
  }

  void value(uint32_t type, int depth) {
    switch (static_cast<ValueType>(type)) {
      case ValueType::STRING: c_.read_string([&] { return "string " + what(); }); return;
      case ValueType::BOOL: bools(1); return;
      case ValueType::ARRAY: {
        if (depth >= File::kMaxArrayDepth)
          c_.fail("metadata key " + quoted(key_) + " nests arrays deeper than " +
                  std::to_string(File::kMaxArrayDepth) + " levels");
        const uint32_t elem = read_type("array element type");
        const uint64_t count = c_.read<uint64_t>([&] { return "array count of metadata key " + quoted(key_); });
        elements(elem, count, depth + 1);
        return;
      }
      default: c_.skip(detail::fixed_size(type), [&] { return what(); }); return;
    }
  }

  // `count` elements of `elem` type, the body of an array at nesting level `depth`.
  void elements(uint32_t elem, uint64_t count, int depth) {
    uint64_t min_size = detail::fixed_size(elem);
    if (elem == static_cast<uint32_t>(ValueType::STRING)) min_size = 8;
    if (elem == static_cast<uint32_t>(ValueType::ARRAY)) min_size = kMinArrayBytes;
    if (count > c_.left() / min_size)
      c_.fail("truncated file: metadata key " + quoted(key_) + " is an array of " + std::to_string(count) + " " +
              value_type_name(elem) + " elements at offset " + std::to_string(c_.pos()) +
              ", more than the " + std::to_string(c_.left()) + " bytes left can hold");
    if (elem == static_cast<uint32_t>(ValueType::BOOL)) {
      bools(count);
    } else if (detail::fixed_size(elem) != 0) {
      c_.skip(count * min_size, [&] { return what(); });  // cannot fail: checked above
    } else {
      for (uint64_t i = 0; i < count; ++i) value(elem, depth);
    }
  }

 private:
  void bools(uint64_t n) {
    c_.need(n, [&] { return what(); });
    for (uint64_t i = 0; i < n; ++i)
      if (c_.here()[i] > 1)
        c_.fail("metadata key " + quoted(key_) + " has an invalid BOOL value " + std::to_string(c_.here()[i]) +
                " at offset " + std::to_string(c_.pos() + i));
    c_.skip(n, [&] { return what(); });
  }

  Cursor& c_;
  std::string_view key_;
};

}  // namespace

std::string value_type_name(uint32_t id) {
  static const char* names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32",  "FLOAT32",
                                "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
  if (id < sizeof names / sizeof names[0]) return names[id];
  return "unknown(" + std::to_string(id) + ")";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated at open: cannot overflow
  return n;
}

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  try {
    f->mapping_ = MappedFile::open(path);
  } catch (const std::runtime_error& e) {
    throw Error(e.what());
  }
  f->base_ = f->mapping_->data();
  f->size_ = f->mapping_->size();
  f->parse();
  return f;
}

std::unique_ptr<File> File::from_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->base_ = size > 0 ? static_cast<const uint8_t*>(data) : nullptr;
  f->size_ = size;
  f->parse();
  return f;
}

File::File() = default;
File::~File() = default;

void File::fail(const std::string& what) const { throw Error(path_ + ": " + what); }

void File::parse() {
  Cursor c(path_, base_, size_);

  // ---- header ----
  c.need(4, [] { return "magic"; });
  const uint32_t magic = load<uint32_t>(base_);
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const char ch = static_cast<char>(base_[i]);
      shown += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    }
    fail("not a GGUF file (bad magic '" + shown + "', expected 'GGUF')");
  }
  c.skip(4, [] { return "magic"; });
  version_ = c.read<uint32_t>([] { return "version"; });
  if (version_ == 1) fail("GGUF version 1 is not supported (only 2 and 3); re-convert the model with current tools");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3)
      fail("big-endian GGUF files are not supported (version " + std::to_string(swapped) + ", byte-swapped)");
    fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  }
  const uint64_t n_tensors = c.read<uint64_t>([] { return "tensor count"; });
  const uint64_t n_kv = c.read<uint64_t>([] { return "metadata key count"; });
  if (n_tensors > kMaxTensors)
    fail("tensor count " + std::to_string(n_tensors) + " is absurd (limit " + std::to_string(kMaxTensors) + ")");
  if (n_kv > kMaxKeys)
    fail("metadata key count " + std::to_string(n_kv) + " is absurd (limit " + std::to_string(kMaxKeys) + ")");
  if (n_kv > c.left() / kMinKvBytes || n_tensors > (c.left() - n_kv * kMinKvBytes) / kMinTensorInfoBytes)
    fail("truncated file: the header's " + std::to_string(n_kv) + " metadata keys and " +
         std::to_string(n_tensors) + " tensors cannot fit in the " + std::to_string(c.left()) +
         " bytes after it");

  // ---- metadata ----
  kvs_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string_view key = c.read_string([&] { return "metadata key #" + std::to_string(i); });
    if (key.empty()) fail("metadata key #" + std::to_string(i) + " is empty");
    if (key.size() > kMaxKeyLength)
      fail("metadata key #" + std::to_string(i) + " is " + std::to_string(key.size()) + " bytes long (limit " +
           std::to_string(kMaxKeyLength) + ")");
    if (kv_index_.count(key)) fail("duplicate metadata key " + quoted(key));
    ValueSkipper skipper(c, key);
    Kv kv{std::string(key), ValueType::UINT8, 0, ValueType::UINT8, 0};
    kv.type = static_cast<ValueType>(skipper.read_type("value type"));
    if (kv.type == ValueType::ARRAY) {
      kv.elem_type = static_cast<ValueType>(skipper.read_type("array element type"));
      kv.count = c.read<uint64_t>([&] { return "array count of metadata key " + quoted(key); });
      kv.pos = c.pos();
      skipper.elements(static_cast<uint32_t>(kv.elem_type), kv.count, 1);
    } else {
      kv.pos = c.pos();
      skipper.value(static_cast<uint32_t>(kv.type), 0);
    }
    kv_index_.emplace(kv.key, kvs_.size());
    kvs_.push_back(std::move(kv));
  }

  // general.alignment: validated before it is used to place the data section.
  if (has("general.alignment")) {
    const int64_t a = *get_int("general.alignment");
    if (a <= 0 || a > std::numeric_limits<uint32_t>::max() || (a & (a - 1)) != 0)
      fail("general.alignment " + std::to_string(a) + " is not a power of two");
    alignment_ = static_cast<uint32_t>(a);
  }

  // ---- tensor table ----
  if (n_tensors > c.left() / kMinTensorInfoBytes)
    fail("truncated file: " + std::to_string(n_tensors) + " tensor infos cannot fit in the " +
         std::to_string(c.left()) + " bytes after the metadata");
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    const std::string_view name = c.read_string([&] { return "name of tensor #" + std::to_string(i); });
    if (name.empty()) fail("tensor #" + std::to_string(i) + " has an empty name");
    t.name = std::string(name);
    const std::string q = quoted(t.name);
    const uint32_t n_dims = c.read<uint32_t>([&] { return "dimension count of tensor " + q; });
    if (n_dims < 1 || n_dims > kMaxDims)
      fail("tensor " + q + " has " + std::to_string(n_dims) + " dimensions (n_dims must be 1.." +
           std::to_string(kMaxDims) + ")");
    c.need(8ull * n_dims, [&] { return "dimensions of tensor " + q; });
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>([&] { return "dimensions of tensor " + q; });
      const std::string where = "tensor " + q + " dims[" + std::to_string(d) + "] = " + std::to_string(dim);
      if (dim == 0) fail(where + ": zero dimension");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel))
        fail(where + ": element count overflows int64");
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const uint32_t type_id = c.read<uint32_t>([&] { return "type of tensor " + q; });
    const auto info = dtype_info(type_id);
    if (!info) fail("tensor " + q + " has type " + dtype_name_any(type_id) + ", which is not a GGML type tandem knows");
    if (!is_dtype_enumerator(type_id))
      fail("tensor " + q + " has type " + std::string(info->name) + ", which tandem does not support");
    t.type = static_cast<DType>(type_id);
    t.offset = c.read<uint64_t>([&] { return "data offset of tensor " + q; });
    if (t.dims[0] % info->block_size != 0)
      fail("tensor " + q + " row length dims[0] = " + std::to_string(t.dims[0]) + " is not a multiple of the " +
           info->name + " block size " + std::to_string(info->block_size));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel / info->block_size), uint64_t{info->type_size}, &nbytes) ||
        nbytes > std::numeric_limits<size_t>::max())
      fail("tensor " + q + " byte size overflows");
    t.nbytes = static_cast<size_t>(nbytes);
    if (tensor_index_.count(t.name)) fail("duplicate tensor name " + q);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // ---- data section ----
  const uint64_t end_of_infos = c.pos();
  data_start_ = static_cast<size_t>((end_of_infos + alignment_ - 1) / alignment_ * alignment_);
  // A file without tensors may end right after its metadata, unpadded: its (empty) data
  // section then starts at the end of the file, never past it (found by fuzz_gguf:
  // data_offset() pointed outside the mapping).
  if (tensors_.empty() && data_start_ > size_) data_start_ = size_;
  for (const TensorInfo& t : tensors_) {
    const std::string q = quoted(t.name);
    if (t.offset % alignment_ != 0)
      fail("tensor " + q + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment_));
    const bool starts_inside = data_start_ <= size_ && t.offset <= size_ - data_start_;
    const bool sum_fits = t.offset <= std::numeric_limits<uint64_t>::max() - data_start_;
    const std::string where = "tensor " + q + " data [offset " +
                              (sum_fits ? std::to_string(data_start_ + t.offset)
                                        : std::to_string(data_start_) + "+" + std::to_string(t.offset)) +
                              ", " + std::to_string(t.nbytes) + " bytes)";
    if (!starts_inside)
      fail("truncated file: " + where + " starts past end of file (" + std::to_string(size_) + " bytes)");
    if (t.nbytes > size_ - data_start_ - t.offset)
      fail("truncated file: " + where + " ends past end of file (" + std::to_string(size_) + " bytes)");
  }
}

const File::Kv* File::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const File::Kv& File::require(std::string_view key) const {
  const Kv* kv = find(key);
  if (!kv) fail("metadata key " + quoted(key) + " is missing");
  return *kv;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* File::tensor_data(const TensorInfo& t) const {
  if (!external_.empty()) {
    if (t.offset >= external_.size() || external_[t.offset].name != t.name)
      fail("tensor " + quoted(t.name) + " is not one of this model's");
    return external_[t.offset].data;
  }
  // Guards against a TensorInfo from another File; ranges of our own were checked at open.
  if (data_start_ > size_ || t.offset > size_ - data_start_ || t.nbytes > size_ - data_start_ - t.offset)
    fail("tensor " + quoted(t.name) + " is not inside this file");
  return base_ + data_start_ + t.offset;
}

void File::release(const TensorInfo& t) const {
  // Heap copies would lose their contents: only file mappings can be dropped and re-read.
  if (!external_.empty()) {
    if (external_[t.offset].releasable) MappedFile::release_pages(tensor_data(t), t.nbytes);
    return;
  }
  if (mapping_) MappedFile::release_pages(tensor_data(t), t.nbytes);
}

}  // namespace tandem::gguf
