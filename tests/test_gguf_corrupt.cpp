// The GGUF reader against damaged files: a valid small file is built, then one field at
// a time is broken (or the file cut short at every byte). Each must fail with a
// gguf::Error whose message names the file and the problem; none may crash, read out of
// bounds or allocate absurdly (run under ASan/UBSan to check the "never" part).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_writer.hpp"
#include "tests/support/paths.hpp"

namespace tandem {
namespace {

using gguf::File;
using gguf::Value;
using gguf::ValueType;
using Bytes = std::vector<uint8_t>;

gguf::Writer base_writer() {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("test.string", "hello");
  w.set_int32_array("test.ints", {1, 2, 3});
  w.set_string_array("test.names", {"ab", "cd"});
  w.set_bool("test.flag", true);
  w.set_u32("test.aaa", 1);
  w.set_u32("test.aab", 2);
  w.set("test.nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::INT32, {Value::i32(1)}),
                                                       Value::array(ValueType::INT32, {Value::i32(2)})}));
  std::vector<uint8_t> data(64 * 2 / 32 * 34, 0x11);
  std::vector<float> f(8 * 4, 0.5f);
  w.add_tensor("tok.weight", DType::F32, {8, 4}, f.data(), f.size() * 4);
  w.add_tensor("blk.0.q.weight", DType::Q8_0, {64, 2}, data.data(), data.size());
  w.add_tensor("blk.0.r.weight", DType::F32, {8}, f.data(), 32);
  return w;
}

Bytes base_file() { return base_writer().to_bytes(3); }

// Position of the first occurrence of `needle`, which the test relies on being unique.
size_t find(const Bytes& b, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= b.size(); ++i)
    if (std::memcmp(b.data() + i, needle.data(), needle.size()) == 0) return i;
  ADD_FAILURE() << "needle not found: " << needle;
  return 0;
}

// Start of the value type tag of a metadata key.
size_t kv_type_at(const Bytes& b, std::string_view key) { return find(b, key) + key.size(); }

// Fields of a tensor info, located through its name.
struct InfoAt {
  size_t name_len, n_dims, dims, type, offset;
};
InfoAt info_at(const Bytes& b, std::string_view name) {
  InfoAt a{};
  const size_t p = find(b, name);
  a.name_len = p - 8;
  a.n_dims = p + name.size();
  uint32_t nd;
  std::memcpy(&nd, b.data() + a.n_dims, 4);
  a.dims = a.n_dims + 4;
  a.type = a.dims + 8 * nd;
  a.offset = a.type + 4;
  return a;
}

template <class T>
void patch(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof v, b.size());
  std::memcpy(b.data() + at, &v, sizeof v);
}

std::string write_file(const Bytes& b, const std::string& name) {
  static const std::string dir = test::scratch_dir("gguf-corrupt");  // once per process
  const std::string path = dir + "/" + name + ".gguf";
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), b.size());
  return path;
}

// Opening must throw gguf::Error starting with the path and containing `fragment`.
void expect_error(const Bytes& b, const std::string& fragment, const std::string& name = "case") {
  const std::string path = write_file(b, name);
  try {
    File::open(path);
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const gguf::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "message: " << msg << "\nexpected fragment: " << fragment;
  }
}

// Loads whatever opened and touches every value and tensor byte, so ASan sees any
// out-of-range access a validation gap would let through.
void exercise(const File& f) {
  for (const std::string& k : f.keys()) {
    (void)f.value_to_string(k, 1000);
    (void)f.array_size(k);
  }
  uint32_t sum = 0;
  for (const auto& t : f.tensors()) {
    const uint8_t* p = f.tensor_data(t);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
  }
  (void)sum;
}

TEST(GgufCorrupt, BaseFileIsValid) {
  const auto path = write_file(base_file(), "base");
  const auto f = File::open(path);
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->get_int_array("test.ints")->size(), 3u);
  exercise(*f);
}

TEST(GgufCorrupt, BadMagic) {
  Bytes b = base_file();
  b[0] = 'X';
  expect_error(b, "not a GGUF file (bad magic 'XGUF'");
  expect_error(Bytes{'G', 'G'}, "truncated file: magic at offset 0 needs 4 bytes, only 2 left");
  expect_error(Bytes{}, "truncated file: magic");
}

TEST(GgufCorrupt, Versions) {
  Bytes b = base_file();
  patch<uint32_t>(b, 4, 1);
  expect_error(b, "GGUF version 1 is not supported");
  patch<uint32_t>(b, 4, 99);
  expect_error(b, "unsupported GGUF version 99 (supported: 2, 3)");
  patch<uint32_t>(b, 4, 0x03000000);
  expect_error(b, "big-endian GGUF files are not supported");
  patch<uint32_t>(b, 4, 0);
  expect_error(b, "unsupported GGUF version 0");
}

TEST(GgufCorrupt, TruncatedAtEveryByte) {
  const Bytes full = base_file();
  const auto path = write_file(full, "full");
  size_t end_of_data = 0;  // the last tensor's padding is not needed
  size_t data_offset = 0;
  {
    const auto f = File::open(path);
    data_offset = f->data_offset();
    for (const auto& t : f->tensors()) end_of_data = std::max(end_of_data, f->data_offset() + t.offset + t.nbytes);
  }
  ASSERT_LT(data_offset, end_of_data);
  for (size_t n = 0; n < end_of_data; ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n) + " bytes");
    expect_error(Bytes(full.begin(), full.begin() + n), "truncated file", "trunc");
  }
  // Cut inside the data section: the error names the tensor and the range.
  expect_error(Bytes(full.begin(), full.begin() + end_of_data - 1),
               "truncated file: tensor 'blk.0.r.weight' data [offset " + std::to_string(end_of_data - 32) +
                   ", 32 bytes) ends past end of file (" + std::to_string(end_of_data - 1) + " bytes)");
  const auto ok = write_file(Bytes(full.begin(), full.begin() + end_of_data), "exact");
  EXPECT_NO_THROW(File::open(ok));
}

TEST(GgufCorrupt, AbsurdCounts) {
  Bytes b = base_file();
  patch<uint64_t>(b, 8, 2'000'000);
  expect_error(b, "tensor count 2000000 is absurd (limit 1000000)");
  patch<uint64_t>(b, 8, 100'000);
  expect_error(b, "cannot fit in the");
  b = base_file();
  patch<uint64_t>(b, 16, 1ull << 62);
  expect_error(b, "metadata key count 4611686018427387904 is absurd");
  patch<uint64_t>(b, 16, 1000);
  expect_error(b, "truncated file: the header's 1000 metadata keys and 3 tensors cannot fit in the");
}

TEST(GgufCorrupt, AbsurdStringLengths) {
  Bytes b = base_file();
  patch<uint64_t>(b, 24, 1ull << 60);  // length of the first key
  expect_error(b, "truncated file: metadata key #0 has length 1152921504606846976");
  b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.string") + 4, 1ull << 60);
  expect_error(b, "string value of metadata key 'test.string' has length 1152921504606846976");
  b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.string") + 4, ~0ull);
  expect_error(b, "has length 18446744073709551615");
  b = base_file();
  patch<uint64_t>(b, info_at(b, "blk.0.q.weight").name_len, 1ull << 60);
  expect_error(b, "name of tensor #1 has length 1152921504606846976");
  // A string inside an array.
  b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.names") + 4 + 4 + 8, 1ull << 60);
  expect_error(b, "string value of metadata key 'test.names' has length");
}

TEST(GgufCorrupt, AbsurdArrayCounts) {
  Bytes b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.ints") + 8, 1ull << 61);
  expect_error(b, "metadata key 'test.ints' is an array of 2305843009213693952 INT32 elements");
  b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.names") + 8, 1ull << 60);
  expect_error(b, "metadata key 'test.names' is an array of 1152921504606846976 STRING elements");
  b = base_file();
  patch<uint64_t>(b, kv_type_at(b, "test.nested") + 8, ~0ull);
  expect_error(b, "is an array of 18446744073709551615 ARRAY elements");
  b = base_file();  // the inner array of a nested array
  patch<uint64_t>(b, kv_type_at(b, "test.nested") + 4 + 4 + 8 + 4, 1ull << 62);
  expect_error(b, "metadata key 'test.nested' is an array of 4611686018427387904 INT32 elements");
}

TEST(GgufCorrupt, BadValueTypes) {
  Bytes b = base_file();
  patch<uint32_t>(b, kv_type_at(b, "test.flag"), 13);
  expect_error(b, "metadata key 'test.flag' has value type unknown(13)");
  b = base_file();
  patch<uint32_t>(b, kv_type_at(b, "test.ints") + 4, 99);
  expect_error(b, "metadata key 'test.ints' has array element type unknown(99)");
  b = base_file();
  patch<uint8_t>(b, kv_type_at(b, "test.flag") + 4, 2);
  expect_error(b, "metadata key 'test.flag' has an invalid BOOL value 2");
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  Value v = Value::array(ValueType::INT32, {Value::i32(1)});
  for (int i = 0; i < File::kMaxArrayDepth; ++i) v = Value::array(ValueType::ARRAY, {v});
  gguf::Writer w;
  w.set("deep", v);
  expect_error(w.to_bytes(), "metadata key 'deep' nests arrays deeper than 8 levels");
  // One level less is fine.
  Value ok = Value::array(ValueType::INT32, {Value::i32(1)});
  for (int i = 0; i < File::kMaxArrayDepth - 1; ++i) ok = Value::array(ValueType::ARRAY, {ok});
  gguf::Writer w2;
  w2.set("deep", ok);
  const auto f = File::open(write_file(w2.to_bytes(), "deep-ok"));
  EXPECT_EQ(f->value_to_string("deep"), "[[[[[[[[1]]]]]]]]");
}

TEST(GgufCorrupt, DuplicateKeyAndTensorName) {
  Bytes b = base_file();
  b[find(b, "test.aab") + 7] = 'a';
  expect_error(b, "duplicate metadata key 'test.aaa'");
  b = base_file();
  b[find(b, "blk.0.r.weight") + 6] = 'q';
  expect_error(b, "duplicate tensor name 'blk.0.q.weight'");
}

TEST(GgufCorrupt, Dimensions) {
  Bytes b = base_file();
  const InfoAt q = info_at(b, "blk.0.q.weight");
  patch<uint32_t>(b, q.n_dims, 7);
  expect_error(b, "tensor 'blk.0.q.weight' has 7 dimensions (n_dims must be 1..4)");
  patch<uint32_t>(b, q.n_dims, 0);
  expect_error(b, "tensor 'blk.0.q.weight' has 0 dimensions");
  patch<uint32_t>(b, q.n_dims, 0xffffffffu);
  expect_error(b, "has 4294967295 dimensions");

  b = base_file();
  patch<uint64_t>(b, q.dims + 8, 0);
  expect_error(b, "tensor 'blk.0.q.weight' dims[1] = 0: zero dimension");
  b = base_file();
  patch<uint64_t>(b, q.dims, 1ull << 40);
  patch<uint64_t>(b, q.dims + 8, 1ull << 40);
  expect_error(b, "tensor 'blk.0.q.weight' dims[1] = 1099511627776: element count overflows int64");
  b = base_file();
  patch<uint64_t>(b, q.dims + 8, 1ull << 63);
  expect_error(b, "dims[1] = 9223372036854775808: element count overflows int64");
  // Large but representable: the data range check catches it without allocating.
  b = base_file();
  patch<uint64_t>(b, q.dims + 8, 1ull << 50);
  expect_error(b, "tensor 'blk.0.q.weight' data [offset");
  // F64 so that the byte size overflows although the element count does not.
  b = base_file();
  patch<uint32_t>(b, q.type, static_cast<uint32_t>(DType::F64));
  patch<uint64_t>(b, q.dims + 8, (1ull << 62) / 64);
  expect_error(b, "tensor 'blk.0.q.weight' byte size overflows");
}

TEST(GgufCorrupt, TensorTypes) {
  Bytes b = base_file();
  const InfoAt q = info_at(b, "blk.0.q.weight");
  patch<uint32_t>(b, q.type, 77);
  expect_error(b, "tensor 'blk.0.q.weight' has type unknown(77)");
  patch<uint32_t>(b, q.type, 16);
  expect_error(b, "tensor 'blk.0.q.weight' has type IQ2_XXS, which tandem does not support");
  patch<uint32_t>(b, q.type, 0xffffffffu);
  expect_error(b, "has type unknown(4294967295)");
  // Row length not a multiple of the block size (48 is not a multiple of 32).
  b = base_file();
  patch<uint64_t>(b, q.dims, 48);
  expect_error(b, "tensor 'blk.0.q.weight' row length dims[0] = 48 is not a multiple of the Q8_0 block size 32");
}

TEST(GgufCorrupt, TensorOffsets) {
  Bytes b = base_file();
  const InfoAt r = info_at(b, "blk.0.r.weight");
  uint64_t off;
  std::memcpy(&off, b.data() + r.offset, 8);
  patch<uint64_t>(b, r.offset, off + 1);
  expect_error(b, "tensor 'blk.0.r.weight' data offset " + std::to_string(off + 1) +
                      " is not a multiple of the alignment 32");
  patch<uint64_t>(b, r.offset, 1ull << 40);
  expect_error(b, "tensor 'blk.0.r.weight' data [offset ");
  expect_error(b, "starts past end of file (" + std::to_string(b.size()) + " bytes)");
  patch<uint64_t>(b, r.offset, ~0ull - 31);  // would overflow data_start + offset
  expect_error(b, "starts past end of file");
  patch<uint64_t>(b, r.offset, off + 32);  // in the file but runs past its end
  expect_error(b, "ends past end of file");
}

TEST(GgufCorrupt, Alignment) {
  gguf::Writer w = base_writer();
  w.set_u32("general.alignment", 64);
  const Bytes good = w.to_bytes();
  EXPECT_EQ(File::open(write_file(good, "align-ok"))->alignment(), 64u);
  const size_t at = kv_type_at(good, "general.alignment");
  Bytes b = good;
  patch<uint32_t>(b, at + 4, 0);
  expect_error(b, "general.alignment 0 is not a power of two");
  patch<uint32_t>(b, at + 4, 3);
  expect_error(b, "general.alignment 3 is not a power of two");
  patch<uint32_t>(b, at + 4, 0x80000001u);
  expect_error(b, "general.alignment 2147483649 is not a power of two");
  b = good;
  patch<uint32_t>(b, at, static_cast<uint32_t>(ValueType::FLOAT32));
  expect_error(b, "metadata key 'general.alignment' has type FLOAT32, expected an integer");
  // A smaller power of two moves the data section: offsets no longer line up with the
  // data, but they are still multiples of 32 inside the file, so the file opens; the
  // important thing is that it does so without reading out of bounds.
  b = good;
  patch<uint32_t>(b, at + 4, 32);
  exercise(*File::open(write_file(b, "align-32")));
}

// Deterministic random damage to the header region: every outcome must be either a clean
// load or a gguf::Error; under ASan this also proves no out-of-bounds reads.
TEST(GgufCorrupt, RandomDamageNeverCrashes) {
  const Bytes full = base_file();
  size_t header_end = 0;
  {
    const auto f = File::open(write_file(full, "rand-base"));
    header_end = f->data_offset();
  }
  uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    Bytes b = full;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = next() % header_end;
      static const uint64_t kExtremes[] = {0, 1, 0xffffffffull, 1ull << 31, 1ull << 60, ~0ull, ~0ull - 31};
      switch (next() % 4) {
        case 0: b[at] ^= static_cast<uint8_t>(1u << (next() % 8)); break;
        case 1: b[at] = static_cast<uint8_t>(next()); break;
        case 2: b[at] = 0xff; break;
        default: {  // an extreme count, length, dim or offset
          const uint64_t v = kExtremes[next() % std::size(kExtremes)];
          std::memcpy(b.data() + at, &v, std::min<size_t>(8, b.size() - at));
        }
      }
    }
    if (next() % 4 == 0) b.resize(next() % b.size());
    const std::string path = write_file(b, "rand");
    try {
      const auto f = File::open(path);
      exercise(*f);
      ++loaded;
    } catch (const gguf::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
}


// Found by tests/fuzz/fuzz_gguf (corpus/gguf/regress_data_offset_past_end): a file without
// tensors that ends right after its metadata, unpadded, had data_offset() past the end of
// the file (the aligned start of its empty data section).
TEST(GgufCorrupt, NoTensorsUnpaddedKeepsDataOffsetInsideTheFile) {
  const uint8_t header[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const auto f = File::from_memory(header, sizeof header, "unpadded");
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->data_offset(), sizeof header);  // not 32
  const auto g = File::open(write_file(Bytes(header, header + sizeof header), "unpadded"));
  EXPECT_EQ(g->data_offset(), sizeof header);
}

// File::from_memory reads the bytes in place with open()'s checks.
TEST(GgufCorrupt, FromMemoryValidatesLikeOpen) {
  const Bytes b = base_file();
  const auto f = File::from_memory(b.data(), b.size(), "mem");
  const auto g = File::open(write_file(b, "mem"));
  EXPECT_EQ(f->keys(), g->keys());
  ASSERT_EQ(f->tensors().size(), g->tensors().size());
  EXPECT_EQ(f->tensor_data(f->tensors()[0]), b.data() + f->data_offset() + f->tensors()[0].offset);
  const Bytes cut(b.begin(), b.end() - 1);
  EXPECT_THROW(File::from_memory(cut.data(), cut.size(), "mem"), tandem::gguf::Error);
}

}  // namespace
}  // namespace tandem
