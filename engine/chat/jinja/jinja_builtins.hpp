// The built-in filters, tests, methods and global functions of the chat-template
// interpreter: Jinja's, restricted to what chat templates use, with Hugging Face's
// changes (tojson without HTML escaping, raise_exception, strftime_now).
//
// The parser asks has_filter / has_test / has_method so that a template using anything
// else is rejected when it is loaded, not when some branch first runs.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "engine/chat/jinja/jinja_value.hpp"

namespace tandem::jinja {

bool has_filter(std::string_view name);
Value apply_filter(Interpreter& in, std::string_view name, const Value& input, Args& args);

bool has_test(std::string_view name);
bool apply_test(Interpreter& in, std::string_view name, const Value& input, Args& args);

// Methods of str (strip, split, startswith, ...), dict (items, keys, values, get) and
// loop (cycle). bound_method: the method of `obj` as a callable value, or nullopt.
bool has_method(std::string_view name);
std::optional<Value> bound_method(const Value& obj, std::string_view name);

// range, namespace, dict, raise_exception, strftime_now.
const Dict& global_functions();
// Jinja globals that exist in Hugging Face's environment but not here.
bool is_unsupported_global(std::string_view name);

// Binds a built-in's arguments the way Python binds parameters: positionally in order,
// then by name; reports missing, surplus and unknown arguments as Python does.
class ArgReader {
 public:
  ArgReader(std::string_view function, Args& args) : fn_(function), args_(args) {}
  std::optional<Value> next(std::string_view param);
  Value required(std::string_view param);
  Value get(std::string_view param, Value fallback) { return next(param).value_or(std::move(fallback)); }
  void done() const;  // throws if any argument was not consumed

 private:
  std::string_view fn_;
  Args& args_;
  size_t used_positional_ = 0;
  std::vector<std::string_view> params_;  // asked for so far
};

}  // namespace tandem::jinja
