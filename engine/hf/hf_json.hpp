// Reading the files of a Hugging Face model folder (JSON and text), with errors that name the
// file and the key. Internal to engine/hf.
#pragma once
#include <boost/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace tandem::hf {

bool file_exists(const std::string& path);

// The whole file; throws std::runtime_error naming it (missing, not a regular file, larger than
// max_bytes, unreadable).
std::string read_text_file(const std::string& path, size_t max_bytes = size_t{64} << 20);

// The whole file parsed; throws std::runtime_error naming the file (as read_text_file, and not
// JSON, not an object).
boost::json::object read_json_object(const std::string& path, size_t max_bytes = size_t{64} << 20);

// Typed lookups: nullopt when the key is absent or null; a value of another type throws,
// naming `file` and the key.
std::optional<int64_t> get_int(const boost::json::object& o, const char* key, const std::string& file);
std::optional<double> get_number(const boost::json::object& o, const char* key, const std::string& file);
std::optional<bool> get_bool(const boost::json::object& o, const char* key, const std::string& file);
std::optional<std::string> get_string(const boost::json::object& o, const char* key, const std::string& file);

}  // namespace tandem::hf
