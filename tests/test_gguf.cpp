// GGUF writer -> reader round trips for every value type, arrays (nested too), tensors,
// versions 2 and 3 and several alignments; and a cross-check of both against gguf-py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <unistd.h>

#include "engine/gguf/gguf.hpp"
#include "engine/gguf/gguf_writer.hpp"
#include "tests/support/gguf_dump.hpp"
#include "tests/support/paths.hpp"

namespace tandem {
namespace {

using gguf::File;
using gguf::Value;
using gguf::ValueType;
using gguf::Writer;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// Every scalar type at its extremes, arrays of every element type, nested arrays.
void add_all_values(Writer& w) {
  w.set("u8", Value::u8(255));
  w.set("i8", Value::i8(-128));
  w.set("u16", Value::u16(65535));
  w.set("i16", Value::i16(-32768));
  w.set_u32("u32", 4294967295u);
  w.set_i32("i32", std::numeric_limits<int32_t>::min());
  w.set_u64("u64", std::numeric_limits<uint64_t>::max());
  w.set_u64("u64.small", 1234567890123ull);
  w.set_i64("i64", std::numeric_limits<int64_t>::min());
  w.set_f32("f32", 1e-5f);
  w.set_f64("f64", -0.1);
  w.set_bool("bool.t", true);
  w.set_bool("bool.f", false);
  w.set_string("str", "h\xc3\xa9llo \"w\"\n");
  w.set_string("str.empty", "");
  w.set_string_array("arr.str", {"a", "", "\xe2\x96\x81the", "<0x0A>"});
  w.set_float_array("arr.f32", {0.f, -1.5f, 3.25e10f, std::numeric_limits<float>::denorm_min()});
  w.set_int32_array("arr.i32", {1, -2, std::numeric_limits<int32_t>::max()});
  w.set_u32_array("arr.u32", {7, 4000000000u});
  w.set("arr.u8", Value::array(ValueType::UINT8, {Value::u8(0), Value::u8(200)}));
  w.set("arr.i8", Value::array(ValueType::INT8, {Value::i8(-1)}));
  w.set("arr.u16", Value::array(ValueType::UINT16, {Value::u16(65535)}));
  w.set("arr.i16", Value::array(ValueType::INT16, {Value::i16(-300)}));
  w.set("arr.u64", Value::array(ValueType::UINT64, {Value::u64(5), Value::u64(1ull << 40)}));
  w.set("arr.i64", Value::array(ValueType::INT64, {Value::i64(-(1ll << 40))}));
  w.set("arr.f64", Value::array(ValueType::FLOAT64, {Value::f64(2.5), Value::f64(1e300)}));
  w.set("arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
  w.set("arr.empty", Value::array(ValueType::INT32, {}));
  w.set("arr.nested", Value::array(ValueType::ARRAY, {Value::array(ValueType::INT32, {Value::i32(1), Value::i32(2)}),
                                                      Value::array(ValueType::INT32, {Value::i32(3)})}));
  w.set("arr.nested.str",
        Value::array(ValueType::ARRAY, {Value::array(ValueType::STRING, {Value::string("x"), Value::string("yz")}),
                                        Value::array(ValueType::STRING, {})}));
  w.set("arr.nested3",
        Value::array(ValueType::ARRAY,
                     {Value::array(ValueType::ARRAY, {Value::array(ValueType::FLOAT32, {Value::f32(0.5f)})})}));
}

void add_tensors(Writer& w) {
  const auto a = pattern(4 * 3 * 4, 1);
  w.add_tensor("t.f32", DType::F32, {4, 3}, a.data(), a.size());
  const auto b = pattern(2 * 5, 2);
  w.add_tensor("t.f16.1d", DType::F16, {5}, b.data(), b.size());
  const auto c = pattern(34 * 2 * 3, 3);  // Q8_0: 32-element blocks of 34 bytes
  w.add_tensor("t.q8_0", DType::Q8_0, {64, 3}, c.data(), c.size());
  const auto d = pattern(2 * 2 * 2 * 3 * 2, 4);
  w.add_tensor("t.bf16.4d", DType::BF16, {2, 2, 3, 2}, d.data(), d.size());
  const auto e = pattern(144, 5);  // one Q4_K super-block
  w.add_tensor("t.q4_k", DType::Q4_K, {256}, e.data(), e.size());
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersions, ScalarRoundTrip) {
  const std::string path = test::scratch_dir("gguf-scalars") + "/m.gguf";
  Writer w;
  add_all_values(w);
  w.write(path, GetParam());
  const auto f = File::open(path);
  EXPECT_EQ(f->version(), GetParam());
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->alignment(), 32u);

  EXPECT_EQ(f->type_of("u8"), ValueType::UINT8);
  EXPECT_EQ(f->type_of("f64"), ValueType::FLOAT64);
  EXPECT_EQ(f->type_of("arr.nested"), ValueType::ARRAY);
  EXPECT_EQ(f->get_int("u8"), 255);
  EXPECT_EQ(f->get_int("i8"), -128);
  EXPECT_EQ(f->get_int("u16"), 65535);
  EXPECT_EQ(f->get_int("i16"), -32768);
  EXPECT_EQ(f->get_int("u32"), 4294967295ll);
  EXPECT_EQ(f->get_int("i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f->get_int("u64.small"), 1234567890123ll);
  EXPECT_EQ(f->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->get_int("bool.t"), 1);
  EXPECT_EQ(f->get_float("f32"), static_cast<double>(1e-5f));
  EXPECT_EQ(f->get_float("f64"), -0.1);
  EXPECT_EQ(f->get_float("i16"), -32768.0);
  EXPECT_EQ(f->get_float("u64"), 18446744073709551615.0);
  EXPECT_EQ(f->get_bool("bool.t"), true);
  EXPECT_EQ(f->get_bool("bool.f"), false);
  EXPECT_EQ(f->get_string("str"), "h\xc3\xa9llo \"w\"\n");
  EXPECT_EQ(f->get_string("str.empty"), "");

  // Missing keys are nullopt; wrong types and out-of-range values are errors.
  EXPECT_FALSE(f->has("nope"));
  EXPECT_EQ(f->get_int("nope"), std::nullopt);
  EXPECT_EQ(f->get_string("nope"), std::nullopt);
  EXPECT_EQ(f->get_string_array("nope"), std::nullopt);
  EXPECT_THROW(f->type_of("nope"), gguf::Error);
  EXPECT_THROW(f->get_int("u64"), gguf::Error);  // 2^64-1 does not fit int64
  EXPECT_THROW(f->get_int("str"), gguf::Error);
  EXPECT_THROW(f->get_int("f32"), gguf::Error);
  EXPECT_THROW(f->get_float("str"), gguf::Error);
  EXPECT_THROW(f->get_bool("u8"), gguf::Error);
  EXPECT_THROW(f->get_string("u8"), gguf::Error);
  EXPECT_THROW(f->architecture(), gguf::Error);
  try {
    f->get_int("str");
    FAIL();
  } catch (const gguf::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'str' has type STRING, expected an integer"), std::string::npos) << e.what();
  }

  EXPECT_EQ(f->value_to_string("u64"), "18446744073709551615");
  EXPECT_EQ(f->value_to_string("f32"), "1e-05");
  EXPECT_EQ(f->value_to_string("f64"), "-0.1");
  EXPECT_EQ(f->value_to_string("bool.f"), "false");
  EXPECT_EQ(f->value_to_string("str"), "\"h\xc3\xa9llo \\\"w\\\"\\n\"");
}

TEST_P(GgufVersions, ArrayRoundTrip) {
  const std::string path = test::scratch_dir("gguf-arrays") + "/m.gguf";
  Writer w;
  add_all_values(w);
  w.write(path, GetParam());
  const auto f = File::open(path);

  EXPECT_EQ(f->get_string_array("arr.str"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the", "<0x0A>"}));
  const auto fl = *f->get_float_array("arr.f32");
  ASSERT_EQ(fl.size(), 4u);
  EXPECT_EQ(fl[1], -1.5f);
  EXPECT_EQ(fl[2], 3.25e10f);
  EXPECT_EQ(fl[3], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(f->get_int_array("arr.i32"), (std::vector<int64_t>{1, -2, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(f->get_int_array("arr.u32"), (std::vector<int64_t>{7, 4000000000ll}));
  EXPECT_EQ(f->get_int_array("arr.u8"), (std::vector<int64_t>{0, 200}));
  EXPECT_EQ(f->get_int_array("arr.i8"), (std::vector<int64_t>{-1}));
  EXPECT_EQ(f->get_int_array("arr.u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f->get_int_array("arr.i16"), (std::vector<int64_t>{-300}));
  EXPECT_EQ(f->get_int_array("arr.u64"), (std::vector<int64_t>{5, 1ll << 40}));
  EXPECT_EQ(f->get_int_array("arr.i64"), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(f->get_int_array("arr.bool"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f->get_float_array("arr.f64"), (std::vector<float>{2.5f, INFINITY}));  // 1e300 as float
  EXPECT_EQ(f->get_float_array("arr.i32"), (std::vector<float>{1.f, -2.f, 2147483648.f}));
  EXPECT_EQ(f->get_int_array("arr.empty"), std::vector<int64_t>{});
  EXPECT_EQ(f->array_type_of("arr.empty"), ValueType::INT32);
  EXPECT_EQ(f->array_type_of("arr.nested"), ValueType::ARRAY);
  EXPECT_EQ(f->array_size("arr.str"), 4u);
  EXPECT_EQ(f->array_size("arr.nested"), 2u);
  EXPECT_EQ(f->array_size("u8"), 0u);
  EXPECT_EQ(f->array_size("nope"), 0u);
  EXPECT_THROW(f->get_string_array("arr.i32"), gguf::Error);
  EXPECT_THROW(f->get_int_array("arr.f32"), gguf::Error);
  EXPECT_THROW(f->get_int_array("arr.nested"), gguf::Error);
  EXPECT_THROW(f->get_float_array("arr.str"), gguf::Error);
  EXPECT_THROW(f->get_int_array("u8"), gguf::Error);
  EXPECT_THROW(f->array_type_of("u8"), gguf::Error);

  EXPECT_EQ(f->value_to_string("arr.str"), "[\"a\", \"\", \"\xe2\x96\x81the\", \"<0x0A>\"]");
  EXPECT_EQ(f->value_to_string("arr.str", 2), "[\"a\", \"\", ...] (4 items)");
  EXPECT_EQ(f->value_to_string("arr.str", 0), "[...] (4 items)");
  EXPECT_EQ(f->value_to_string("arr.empty"), "[]");
  EXPECT_EQ(f->value_to_string("arr.bool"), "[true, false]");
  EXPECT_EQ(f->value_to_string("arr.nested"), "[[1, 2], [3]]");
  // Cutting an inner array must still step over its remaining items.
  EXPECT_EQ(f->value_to_string("arr.nested", 1), "[[1, ...] (2 items), ...] (2 items)");
  EXPECT_EQ(f->value_to_string("arr.nested.str"), "[[\"x\", \"yz\"], []]");
  EXPECT_EQ(f->value_to_string("arr.nested3"), "[[[0.5]]]");

  // Keys come back in file order.
  std::vector<std::string> expected = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "u64.small", "i64", "f32"};
  auto keys = f->keys();
  keys.resize(expected.size());
  EXPECT_EQ(keys, expected);
}

TEST_P(GgufVersions, TensorRoundTrip) {
  const std::string path = test::scratch_dir("gguf-tensors") + "/m.gguf";
  Writer w;
  w.set_string("general.architecture", "llama");
  add_tensors(w);
  w.write(path, GetParam());
  const auto f = File::open(path);
  EXPECT_EQ(f->architecture(), "llama");
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->data_offset() % 32, 0u);

  const gguf::TensorInfo* t = f->find_tensor("t.q8_0");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::Q8_0);
  EXPECT_EQ(t->dims, (std::vector<int64_t>{64, 3}));
  EXPECT_EQ(t->numel(), 192);
  EXPECT_EQ(t->nbytes, 34u * 6);
  EXPECT_EQ(t->offset % 32, 0u);
  const auto expect = pattern(34 * 6, 3);
  EXPECT_EQ(std::memcmp(f->tensor_data(*t), expect.data(), expect.size()), 0);

  const auto* t4 = f->find_tensor("t.bf16.4d");
  ASSERT_NE(t4, nullptr);
  EXPECT_EQ(t4->dims, (std::vector<int64_t>{2, 2, 3, 2}));
  EXPECT_EQ(t4->numel(), 24);
  EXPECT_EQ(std::memcmp(f->tensor_data(*t4), pattern(48, 4).data(), 48), 0);
  EXPECT_EQ(f->find_tensor("t.f16.1d")->dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(f->find_tensor("t.q4_k")->nbytes, 144u);
  EXPECT_EQ(f->find_tensor("absent"), nullptr);
  // Tensors keep their file order.
  EXPECT_EQ(f->tensors()[0].name, "t.f32");
  EXPECT_EQ(f->tensors()[4].name, "t.q4_k");
}

TEST_P(GgufVersions, MatchesPythonReader) {
  const std::string path = test::scratch_dir("gguf-python") + "/m.gguf";
  Writer w;
  add_all_values(w);
  add_tensors(w);
  w.write(path, GetParam());
  const auto f = File::open(path);
  std::string py;
  ASSERT_TRUE(test::gguf_dump_python(path, &py)) << py;
  std::string ours = test::gguf_dump(*f);

  // gguf-py flattens nested arrays: check those lines by hand, then compare the rest.
  auto take_line = [](std::string& dump, const std::string& key) {
    const std::string prefix = "kv " + test::hex(key) + " ";
    const size_t at = dump.find(prefix);
    if (at == std::string::npos) return std::string("<missing>");
    const size_t end = dump.find('\n', at);
    std::string line = dump.substr(at + prefix.size(), end - at - prefix.size());
    dump.erase(at, end - at + 1);
    return line;
  };
  EXPECT_EQ(take_line(py, "arr.nested"), "ARRAY,ARRAY,INT32 3 1 2 3");
  EXPECT_EQ(take_line(py, "arr.nested.str"), "ARRAY,ARRAY,STRING 2 s:78 s:797a");
  EXPECT_EQ(take_line(py, "arr.nested3"), "ARRAY,ARRAY,ARRAY,FLOAT32 1 f:3f000000");
  for (const char* k : {"arr.nested", "arr.nested.str", "arr.nested3"}) EXPECT_EQ(take_line(ours, k), "nested");
  EXPECT_EQ(ours, py);
}

INSTANTIATE_TEST_SUITE_P(V2V3, GgufVersions, ::testing::Values(2u, 3u));

class GgufAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufAlignment, DataHonoursAlignment) {
  const uint32_t a = GetParam();
  const std::string path = test::scratch_dir("gguf-align") + "/m.gguf";
  Writer w;
  w.set_u32("general.alignment", a);
  w.set_string("general.name", "x");  // makes the end of the infos odd
  add_tensors(w);
  EXPECT_EQ(w.alignment(), a);
  w.write(path);
  const auto f = File::open(path);
  EXPECT_EQ(f->alignment(), a);
  EXPECT_EQ(f->data_offset() % a, 0u);
  for (const auto& t : f->tensors()) {
    EXPECT_EQ(t.offset % a, 0u) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensor_data(t)) % std::min<uint32_t>(a, 4096), 0u) << t.name;
  }
  EXPECT_EQ(std::memcmp(f->tensor_data(*f->find_tensor("t.q4_k")), pattern(144, 5).data(), 144), 0);
  std::string py;
  ASSERT_TRUE(test::gguf_dump_python(path, &py)) << py;
  EXPECT_EQ(test::gguf_dump(*f), py);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignment, ::testing::Values(1u, 8u, 32u, 64u, 4096u));

// Resident pages of this process (/proc/self/statm, second field), in bytes.
size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t total = 0, resident = 0;
  in >> total >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// release(): a packed model does not hold its weights twice (engine/model/model.cpp), and
// the bytes stay readable and unchanged after it.
TEST(Gguf, ReleasedTensorLeavesResidentMemoryAndStaysReadable) {
  const std::string path = test::scratch_dir("gguf-release") + "/m.gguf";
  const size_t n = 24u << 20;  // 24 MiB of F32
  const auto big = pattern(n, 7), small = pattern(4 * 16, 8);
  {
    Writer w;
    w.add_tensor("small", DType::F32, {16}, small.data(), small.size());
    w.add_tensor("big", DType::F32, {static_cast<int64_t>(n / 4)}, big.data(), big.size());
    w.write(path);
  }
  const auto f = File::open(path);
  const gguf::TensorInfo* t = f->find_tensor("big");
  ASSERT_NE(t, nullptr);
  auto checksum = [&] {
    uint64_t h = 0;
    const uint8_t* p = f->tensor_data(*t);
    for (size_t i = 0; i < t->nbytes; ++i) h = h * 1099511628211ull + p[i];
    return h;
  };
  const uint64_t before = checksum();  // every page of it resident now
  const size_t rss_read = resident_bytes();
  f->release(*t);
  const size_t rss_released = resident_bytes();
  EXPECT_GT(rss_read, rss_released + (16u << 20)) << "the tensor's pages left the resident set";
  EXPECT_EQ(checksum(), before) << "read back from the file";
  EXPECT_EQ(std::memcmp(f->tensor_data(*f->find_tensor("small")), small.data(), small.size()), 0);
  // Bytes that are not a mapping of ours (from_memory) are the caller's: dropping their
  // pages would zero anonymous memory, so release leaves them alone.
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto m = File::from_memory(bytes.data(), bytes.size());
  const gguf::TensorInfo* mt = m->find_tensor("big");
  ASSERT_NE(mt, nullptr);
  m->release(*mt);
  EXPECT_EQ(std::memcmp(m->tensor_data(*mt), big.data(), big.size()), 0);
}

TEST(Gguf, EmptyFileWithNoKeysOrTensors) {
  const std::string path = test::scratch_dir("gguf-empty") + "/m.gguf";
  Writer().write(path);
  const auto f = File::open(path);
  EXPECT_TRUE(f->keys().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->file_size(), 32u);  // header padded to the alignment
}

TEST(Gguf, OpenErrorsNameTheFile) {
  const std::string dir = test::scratch_dir("gguf-open");
  try {
    File::open(dir + "/missing.gguf");
    FAIL();
  } catch (const gguf::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing.gguf: cannot open"), std::string::npos) << e.what();
  }
  EXPECT_THROW(File::open(dir), gguf::Error);  // a directory
}

TEST(Gguf, WriterRefusesMisuse) {
  Writer w;
  std::vector<uint8_t> buf(1024);
  EXPECT_THROW(w.add_tensor("a", DType::F32, {4}, buf.data(), 15), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("a", DType::Q4_0, {16}, buf.data(), 9), std::invalid_argument);  // 16 % 32
  EXPECT_THROW(w.add_tensor("a", DType::F32, {}, buf.data(), 4), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("a", DType::F32, {1, 1, 1, 1, 1}, buf.data(), 4), std::invalid_argument);
  EXPECT_THROW(w.add_tensor("a", DType::F32, {0}, buf.data(), 0), std::invalid_argument);
  w.add_tensor("a", DType::F32, {4}, buf.data(), 16);
  EXPECT_THROW(w.add_tensor("a", DType::F32, {4}, buf.data(), 16), std::invalid_argument);
  EXPECT_THROW(w.to_bytes(1), std::invalid_argument);
  EXPECT_THROW(Value::array(ValueType::INT32, {Value::u8(1)}), std::invalid_argument);
  w.set_u32("general.alignment", 48);
  EXPECT_THROW(w.to_bytes(), std::invalid_argument);
  // Setting a key again replaces it in place.
  Writer k;
  k.set_u32("a", 1);
  k.set_u32("b", 2);
  k.set_string("a", "x");
  const std::string path = test::scratch_dir("gguf-replace") + "/m.gguf";
  k.write(path);
  const auto f = File::open(path);
  EXPECT_EQ(f->keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f->get_string("a"), "x");
}

}  // namespace
}  // namespace tandem
