#include "engine/hf/safetensors.hpp"

#include "engine/gguf/mapped_file.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <limits>

namespace tandem::st {
namespace {

struct DtypeRow {
  Dtype t;
  const char* name;
  size_t size;
};
constexpr DtypeRow kDtypes[] = {
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},   {Dtype::I8, "I8", 1},     {Dtype::F8_E5M2, "F8_E5M2", 1},
    {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::I16, "I16", 2}, {Dtype::U16, "U16", 2}, {Dtype::F16, "F16", 2},
    {Dtype::BF16, "BF16", 2}, {Dtype::I32, "I32", 4}, {Dtype::U32, "U32", 4}, {Dtype::F32, "F32", 4},
    {Dtype::F64, "F64", 8},   {Dtype::I64, "I64", 8}, {Dtype::U64, "U64", 8},
};

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (const char c : s.substr(0, 200)) out += (static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  return out + (s.size() > 200 ? "...'" : "'");
}

}  // namespace

std::optional<Dtype> parse_dtype(std::string_view s) {
  for (const DtypeRow& r : kDtypes)
    if (s == r.name) return r.t;
  return std::nullopt;
}
const char* dtype_name(Dtype t) {
  for (const DtypeRow& r : kDtypes)
    if (r.t == t) return r.name;
  return "?";
}
size_t dtype_size(Dtype t) {
  for (const DtypeRow& r : kDtypes)
    if (r.t == t) return r.size;
  return 1;
}
std::optional<DType> engine_type(Dtype t) {
  switch (t) {
    case Dtype::F32: return DType::F32;
    case Dtype::F16: return DType::F16;
    case Dtype::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded at open
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

const TensorInfo* File::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* File::data(const TensorInfo& t) const {
  const size_t avail = size_ - data_start_;
  if (t.begin > t.end || t.end > avail) fail("tensor " + quoted(t.name) + " is not inside this file");
  return base_ + data_start_ + t.begin;
}

void File::parse() {
  if (size_ < 8) fail("truncated file: " + std::to_string(size_) + " bytes, not even the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | base_[i];
  if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " is absurd (not a safetensors file?)");
  if (n > size_ - 8)
    fail("truncated file: the header says " + std::to_string(n) + " bytes of JSON, only " + std::to_string(size_ - 8) +
         " follow");
  data_start_ = 8 + static_cast<size_t>(n);
  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), static_cast<size_t>(n));

  boost::json::parse_options opts;
  opts.max_depth = 8;
  boost::system::error_code ec;
  boost::json::value root = boost::json::parse(text, ec, {}, opts);
  if (ec) fail("header is not valid JSON: " + ec.message());
  if (!root.is_object()) fail("header is not a JSON object");

  const uint64_t avail = size_ - data_start_;
  for (const auto& kv : root.as_object()) {
    const std::string name(kv.key());
    if (name == "__metadata__") {
      if (!kv.value().is_object()) fail("__metadata__ is not an object");
      for (const auto& m : kv.value().as_object()) {
        if (!m.value().is_string()) fail("__metadata__ value " + quoted(m.key()) + " is not a string");
        metadata_.emplace(std::string(m.key()), std::string(m.value().as_string()));
      }
      continue;
    }
    const std::string q = quoted(name);
    if (name.empty()) fail("a tensor has an empty name");
    if (!kv.value().is_object()) fail("tensor " + q + " is not an object");
    const boost::json::object& o = kv.value().as_object();
    const boost::json::value* dt = o.if_contains("dtype");
    const boost::json::value* sh = o.if_contains("shape");
    const boost::json::value* off = o.if_contains("data_offsets");
    if (!dt || !dt->is_string()) fail("tensor " + q + " has no dtype string");
    if (!sh || !sh->is_array()) fail("tensor " + q + " has no shape array");
    if (!off || !off->is_array() || off->as_array().size() != 2) fail("tensor " + q + " has no [begin, end] data_offsets");
    TensorInfo t;
    t.name = name;
    const std::optional<Dtype> d = parse_dtype(std::string_view(dt->as_string()));
    if (!d) fail("tensor " + q + " has unknown dtype " + quoted(std::string_view(dt->as_string())));
    t.dtype = *d;
    if (sh->as_array().size() > kMaxDims)
      fail("tensor " + q + " has " + std::to_string(sh->as_array().size()) + " dimensions (at most " +
           std::to_string(kMaxDims) + ")");
    // The element count is bounded by the file size (checked per dimension so that the
    // product cannot overflow); a zero dimension makes an empty tensor.
    uint64_t numel = 1;
    bool empty = false;
    for (const boost::json::value& v : sh->as_array()) {
      if (!v.is_int64() && !v.is_uint64()) fail("tensor " + q + " has a shape entry that is not an integer");
      if (v.is_int64() && v.as_int64() < 0) fail("tensor " + q + " has a negative dimension");
      const uint64_t dim = v.is_int64() ? static_cast<uint64_t>(v.as_int64()) : v.as_uint64();
      if (dim > avail + 1) fail("tensor " + q + " dimension " + std::to_string(dim) + " cannot fit in the file");
      if (dim == 0) empty = true;
      t.shape.push_back(static_cast<int64_t>(dim));
      if (!empty && dim > 0) {
        if (numel > avail / dim + 1) fail("tensor " + q + " has more elements than the file has bytes");
        numel *= dim;
      }
    }
    if (empty) numel = 0;
    uint64_t be[2];
    for (int i = 0; i < 2; ++i) {
      const boost::json::value& v = off->as_array()[static_cast<size_t>(i)];
      if (v.is_int64() && v.as_int64() >= 0) be[i] = static_cast<uint64_t>(v.as_int64());
      else if (v.is_uint64()) be[i] = v.as_uint64();
      else fail("tensor " + q + " has a data offset that is not a non-negative integer");
    }
    t.begin = be[0];
    t.end = be[1];
    if (t.begin > t.end) fail("tensor " + q + " data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "] are reversed");
    if (t.end > avail)
      fail("truncated file: tensor " + q + " ends at data byte " + std::to_string(t.end) + ", the file has " +
           std::to_string(avail));
    const uint64_t want = numel * dtype_size(t.dtype);
    if (t.end - t.begin != want)
      fail("tensor " + q + " has " + std::to_string(t.end - t.begin) + " bytes, its shape and dtype need " +
           std::to_string(want));
    if (index_.count(name)) fail("duplicate tensor " + q);
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  // No two tensors may share bytes (the format's writers lay them out back to back).
  std::vector<const TensorInfo*> by_start;
  for (const TensorInfo& t : tensors_)
    if (t.end > t.begin) by_start.push_back(&t);
  std::sort(by_start.begin(), by_start.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i]->begin < by_start[i - 1]->end)
      fail("tensors " + quoted(by_start[i - 1]->name) + " and " + quoted(by_start[i]->name) + " overlap");
}

}  // namespace tandem::st
