#include "engine/hf/hf_json.hpp"

#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace tandem::hf {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(path + ": missing");
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file");
  if (static_cast<size_t>(st.st_size) > max_bytes)
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, larger than any such file should be");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

boost::json::object read_json_object(const std::string& path, size_t max_bytes) {
  const std::string text = read_text_file(path, max_bytes);
  boost::json::parse_options opts;
  opts.max_depth = 64;
  opts.allow_invalid_utf8 = false;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec, {}, opts);
  if (ec) throw std::runtime_error(path + ": not valid JSON: " + ec.message());
  if (!v.is_object()) throw std::runtime_error(path + ": not a JSON object");
  return std::move(v.as_object());
}

namespace {
const boost::json::value* lookup(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}
[[noreturn]] void wrong(const std::string& file, const char* key, const char* want) {
  throw std::runtime_error(file + ": '" + key + "' is not " + want);
}
}  // namespace

std::optional<int64_t> get_int(const boost::json::object& o, const char* key, const std::string& file) {
  const boost::json::value* v = lookup(o, key);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(v->as_uint64());
  wrong(file, key, "an integer");
}
std::optional<double> get_number(const boost::json::object& o, const char* key, const std::string& file) {
  const boost::json::value* v = lookup(o, key);
  if (!v) return std::nullopt;
  if (v->is_double()) return v->as_double();
  if (v->is_int64()) return static_cast<double>(v->as_int64());
  if (v->is_uint64()) return static_cast<double>(v->as_uint64());
  wrong(file, key, "a number");
}
std::optional<bool> get_bool(const boost::json::object& o, const char* key, const std::string& file) {
  const boost::json::value* v = lookup(o, key);
  if (!v) return std::nullopt;
  if (v->is_bool()) return v->as_bool();
  wrong(file, key, "true or false");
}
std::optional<std::string> get_string(const boost::json::object& o, const char* key, const std::string& file) {
  const boost::json::value* v = lookup(o, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  wrong(file, key, "a string");
}

}  // namespace tandem::hf
