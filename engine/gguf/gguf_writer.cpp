// GGUF serialisation. Layout (v2 and v3 are identical for little-endian files):
// magic, version, tensor count, key count, the keys, the tensor infos, padding to the
// alignment, then each tensor's data followed by padding to the alignment.
#include "engine/gguf/gguf_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace tandem::gguf {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  // resize+memcpy rather than insert(): GCC 12 -O3 misreports insert() of a small array.
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);  // little-endian host (see gguf_bytes.hpp)
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void pad_to(std::vector<uint8_t>& out, uint64_t alignment) {
  out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
}

}  // namespace

// The fixed-size scalars differ only in C++ type and tag.
#define TANDEM_GGUF_SCALAR(fn, T, VT)     \
  Value Value::fn(T v) {                  \
    Value out;                            \
    out.type_ = ValueType::VT;            \
    put<T>(out.bytes_, v);                \
    return out;                           \
  }
TANDEM_GGUF_SCALAR(u8, uint8_t, UINT8)
TANDEM_GGUF_SCALAR(i8, int8_t, INT8)
TANDEM_GGUF_SCALAR(u16, uint16_t, UINT16)
TANDEM_GGUF_SCALAR(i16, int16_t, INT16)
TANDEM_GGUF_SCALAR(u32, uint32_t, UINT32)
TANDEM_GGUF_SCALAR(i32, int32_t, INT32)
TANDEM_GGUF_SCALAR(u64, uint64_t, UINT64)
TANDEM_GGUF_SCALAR(i64, int64_t, INT64)
TANDEM_GGUF_SCALAR(f32, float, FLOAT32)
TANDEM_GGUF_SCALAR(f64, double, FLOAT64)
#undef TANDEM_GGUF_SCALAR

Value Value::boolean(bool v) {
  Value out;
  out.type_ = ValueType::BOOL;
  out.bytes_.push_back(v ? 1 : 0);
  return out;
}

Value Value::string(std::string_view v) {
  Value out;
  out.type_ = ValueType::STRING;
  put_string(out.bytes_, v);
  return out;
}

Value Value::array(ValueType elem, const std::vector<Value>& items) {
  Value out;
  out.type_ = ValueType::ARRAY;
  put<uint32_t>(out.bytes_, static_cast<uint32_t>(elem));
  put<uint64_t>(out.bytes_, items.size());
  for (const Value& v : items) {
    if (v.type_ != elem)
      throw std::invalid_argument("gguf::Value::array: item of type " + value_type_name(v.type_) +
                                  " in an array of " + value_type_name(elem));
    out.bytes_.insert(out.bytes_.end(), v.bytes_.begin(), v.bytes_.end());
  }
  return out;
}

void Writer::set(const std::string& key, Value v) {
  if (key.empty()) throw std::invalid_argument("gguf::Writer: empty metadata key");
  for (Kv& kv : kvs_)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kvs_.push_back({key, std::move(v)});
}

// Typed conveniences for the arrays model files use (tokens, scores, token types).
void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(Value::string(s));
  set(key, Value::array(ValueType::STRING, items));
}

void Writer::set_float_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (float f : v) items.push_back(Value::f32(f));
  set(key, Value::array(ValueType::FLOAT32, items));
}

void Writer::set_int32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (int32_t i : v) items.push_back(Value::i32(i));
  set(key, Value::array(ValueType::INT32, items));
}

void Writer::set_u32_array(const std::string& key, const std::vector<uint32_t>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (uint32_t i : v) items.push_back(Value::u32(i));
  set(key, Value::array(ValueType::UINT32, items));
}

void Writer::add_tensor(const std::string& name, DType type, std::vector<int64_t> dims, const void* data,
                        size_t nbytes) {
  const std::string where = "gguf::Writer: tensor '" + name + "': ";
  if (name.empty()) throw std::invalid_argument("gguf::Writer: empty tensor name");
  for (const Tensor& t : tensors_)
    if (t.name == name) throw std::invalid_argument(where + "duplicate name");
  if (dims.empty() || dims.size() > File::kMaxDims) throw std::invalid_argument(where + "needs 1..4 dims");
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d <= 0 || __builtin_mul_overflow(numel, d, &numel))
      throw std::invalid_argument(where + "dims must be positive and not overflow");
  }
  const DTypeInfo& info = dtype_info(type);
  if (dims[0] % info.block_size != 0)
    throw std::invalid_argument(where + "dims[0] = " + std::to_string(dims[0]) + " is not a multiple of the " +
                                info.name + " block size " + std::to_string(info.block_size));
  const size_t expected = static_cast<size_t>(numel / info.block_size) * info.type_size;
  if (nbytes != expected)
    throw std::invalid_argument(where + std::to_string(nbytes) + " bytes given, shape and type need " +
                                std::to_string(expected));
  const auto* p = static_cast<const uint8_t*>(data);
  tensors_.push_back({name, type, std::move(dims), std::vector<uint8_t>(p, p + nbytes)});
}

uint32_t Writer::alignment() const {
  for (const Kv& kv : kvs_) {
    if (kv.key != "general.alignment") continue;
    uint32_t a = 0;
    if (kv.value.type() != ValueType::UINT32)
      throw std::invalid_argument("gguf::Writer: general.alignment must be a UINT32");
    std::memcpy(&a, kv.value.bytes().data(), 4);
    if (a == 0 || (a & (a - 1)) != 0)
      throw std::invalid_argument("gguf::Writer: general.alignment " + std::to_string(a) + " is not a power of two");
    return a;
  }
  return File::kDefaultAlignment;
}

std::vector<uint8_t> Writer::to_bytes(uint32_t version) const {
  if (version != 2 && version != 3) throw std::invalid_argument("gguf::Writer: can only write versions 2 and 3");
  const uint64_t align = alignment();
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);  // "GGUF"
  put<uint32_t>(out, version);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_string(out, kv.key);
    put<uint32_t>(out, static_cast<uint32_t>(kv.value.type()));
    out.insert(out.end(), kv.value.bytes().begin(), kv.value.bytes().end());
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (t.data.size() + align - 1) / align * align;
  }
  pad_to(out, align);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    pad_to(out, align);
  }
  return out;
}

void Writer::write(const std::string& path, uint32_t version) const {
  const std::vector<uint8_t> bytes = to_bytes(version);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fflush(f) == 0;
  const int e = errno;
  std::fclose(f);
  if (!ok) throw Error(path + ": write failed: " + std::strerror(e));
}

}  // namespace tandem::gguf
