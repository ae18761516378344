// Writing GGUF files (v2 or v3, little-endian), mainly for tests and fixture models:
// metadata in insertion order, tensors in insertion order, each tensor's data placed at
// a multiple of the alignment (32, or general.alignment when that key is set).
// Misuse (a size that does not match the shape, a duplicate tensor) throws
// std::invalid_argument; failing to write the file throws gguf::Error.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf.hpp"

namespace tandem::gguf {

// One metadata value, already encoded: its type and its bytes as they appear in the file
// after the type tag. Arrays are built from Values, so arrays can nest.
class Value {
 public:
  static Value u8(uint8_t v);
  static Value i8(int8_t v);
  static Value u16(uint16_t v);
  static Value i16(int16_t v);
  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value i64(int64_t v);
  static Value f32(float v);
  static Value f64(double v);
  static Value boolean(bool v);
  static Value string(std::string_view v);
  // Every item must have type `elem` (for nested arrays elem is ARRAY).
  static Value array(ValueType elem, const std::vector<Value>& items);

  ValueType type() const { return type_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  ValueType type_ = ValueType::UINT8;
  std::vector<uint8_t> bytes_;
};

class Writer {
 public:
  // Sets a key; setting an existing key replaces its value and keeps its position.
  void set(const std::string& key, Value v);
  void set_u32(const std::string& key, uint32_t v) { set(key, Value::u32(v)); }
  void set_i32(const std::string& key, int32_t v) { set(key, Value::i32(v)); }
  void set_u64(const std::string& key, uint64_t v) { set(key, Value::u64(v)); }
  void set_i64(const std::string& key, int64_t v) { set(key, Value::i64(v)); }
  void set_f32(const std::string& key, float v) { set(key, Value::f32(v)); }
  void set_f64(const std::string& key, double v) { set(key, Value::f64(v)); }
  void set_bool(const std::string& key, bool v) { set(key, Value::boolean(v)); }
  void set_string(const std::string& key, std::string_view v) { set(key, Value::string(v)); }
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_float_array(const std::string& key, const std::vector<float>& v);
  void set_int32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_u32_array(const std::string& key, const std::vector<uint32_t>& v);

  // Copies nbytes of data, which must be exactly what `type` and `dims` need
  // (dims[0] innermost, 1..4 dims, dims[0] a multiple of the type's block size).
  void add_tensor(const std::string& name, DType type, std::vector<int64_t> dims, const void* data,
                  size_t nbytes);

  // general.alignment if set (it must be a UINT32 power of two), else 32.
  uint32_t alignment() const;
  size_t tensor_count() const { return tensors_.size(); }

  std::vector<uint8_t> to_bytes(uint32_t version = 3) const;  // version 2 or 3
  void write(const std::string& path, uint32_t version = 3) const;

 private:
  struct Kv {
    std::string key;
    Value value;
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace tandem::gguf
