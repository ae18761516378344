// The values a chat template computes with: the part of Python's object model that
// Jinja templates see (None, bool, int, float, str, list, tuple, dict), plus Jinja's
// own Undefined, namespace(), the loop object, and callables (built-in functions,
// bound string/dict methods, macros).
//
// Values are immutable and cheap to copy: strings, lists and dicts are shared. The one
// mutable kind is the namespace, which is exactly what Jinja's namespace() is for
// (carrying state out of a for loop), so it has reference semantics as in Python.
// Python's int is unbounded; here it is int64 and arithmetic that overflows is an error.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::jinja {

class Value;
class Interpreter;

// Thrown by every part of the interpreter. `pos` is a byte offset into the normalised
// template source (kNoPos until the innermost expression that failed fills it in).
class Error : public std::runtime_error {
 public:
  static constexpr uint32_t kNoPos = UINT32_MAX;
  explicit Error(const std::string& message, uint32_t pos = kNoPos, bool raised = false)
      : std::runtime_error(message), pos(pos), raised_by_template(raised) {}
  uint32_t pos;
  bool raised_by_template;  // raise_exception(...) called by the template itself
};

// Bounds that keep a hostile or buggy template from exhausting memory or time.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;  // any one string, and the output
inline constexpr size_t kMaxListItems = size_t{1} << 20;     // any one list built by the template
inline constexpr uint32_t kMaxNesting = 256;                 // lists/dicts/namespaces within each other
// Bytes of strings and list slots built during one render, all together: bounds the time a
// template can spend copying large values (a loop that rebuilds a 60 MB string 100000 times
// stays under every other limit).
inline constexpr uint64_t kMaxWorkBytes = uint64_t{1} << 30;

struct List {
  std::vector<Value> items;
  bool tuple = false;  // a Python tuple: prints as (a, b) and never equals a list
  uint32_t depth = 1;  // nesting, bounded by kMaxNesting so that printing, comparing and
                       // freeing (all recursive) stay within the stack
};

// Insertion-ordered, as Python dicts are. Lookups are linear: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  uint32_t depth = 1;  // as List::depth; set by Value::dict / Value::ns
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces the value of an equal key in place
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

class Function {
 public:
  virtual ~Function() = default;
  virtual std::string_view name() const = 0;
  virtual Value call(Interpreter& in, Args& args) const = 0;
};

// What `loop` shows inside one iteration of a for loop.
struct LoopInfo {
  std::shared_ptr<const std::vector<Value>> items;  // everything iterated (after the loop's filter)
  size_t index0 = 0;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Loop };

  Value() = default;  // undefined, with no name to report
  // `hint` is the message an operation on this value reports, e.g. "'x' is undefined".
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  // These three throw Error when the result would nest deeper than kMaxNesting.
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(Dict d);
  static Value ns(Dict d);
  static Value function(std::shared_ptr<const Function> f);
  static Value loop(std::shared_ptr<const LoopInfo> l);  // the loop advances it in place

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }  // list or tuple
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::Float; }

  bool as_bool() const { return scalar_.b; }  // kind Bool
  int64_t as_int() const { return kind_ == Kind::Bool ? scalar_.b : scalar_.i; }  // is_int()
  double as_double() const;                   // is_number()
  const std::string& str() const;             // kind String
  const List& list() const;                   // kind List
  const Dict& dict() const;                   // kind Dict or Namespace
  Dict& ns_dict() const;                      // kind Namespace
  const Function& function() const;           // kind Function
  const LoopInfo& loop() const;               // kind Loop
  const std::string& undefined_hint() const;  // kind Undefined ("" when none)
  const void* identity() const;               // shared object, for Python's `is`

 private:
  Kind kind_ = Kind::Undefined;
  union {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::variant<std::monostate, std::shared_ptr<const std::string>, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Dict>, std::shared_ptr<const Function>,
               std::shared_ptr<const LoopInfo>>
      ptr_;
};

// 0 for scalars, else the depth of lists/dicts/namespaces within the value.
uint32_t nesting(const Value& v);
// Sets attribute `key` of a namespace, refusing values that contain the namespace itself
// (a cycle would never be freed and would print forever) or nest too deeply.
void namespace_set(const Value& ns, const std::string& key, Value value);

// Python's type name of the value, as error messages name it ('str', 'NoneType', ...).
const char* type_name(const Value& v);
bool truthy(const Value& v);
// Python `==` (1 == 1.0 == True; list never equals tuple); Undefined equals Undefined.
bool equal(const Value& a, const Value& b);
// Python `<` for numbers, strings and same-kind sequences; throws Error otherwise.
bool less(const Value& a, const Value& b, const char* op = "<");
bool greater(const Value& a, const Value& b, const char* op = ">");  // b < a, errors naming a first
// Python str(): how {{ value }} prints. Undefined prints as "".
std::string to_str(const Value& v);
// Python repr(): how a value prints inside a printed list or dict.
std::string repr(const Value& v);
// Throws the error an operation on an undefined value reports.
[[noreturn]] void throw_undefined(const Value& v);
// The string as a Value, failing when it exceeds kMaxStringBytes.
Value checked_string(std::string s);
// Throws the size-limit error when a string of `bytes` would exceed kMaxStringBytes;
// called before building one.
void check_string_size(size_t bytes);
// Adds `bytes` to the running render's work budget (Limits::max_work_bytes; see WorkBudget), throwing
// Error when it is exhausted. Outside a render (no WorkBudget on this thread) it does nothing.
void charge_work(uint64_t bytes);

// The work budget of one render on this thread (renders do not nest, and each runs on one
// thread), installed by Interpreter::render for its duration.
class WorkBudget {
 public:
  explicit WorkBudget(uint64_t limit);
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;
  void charge(uint64_t bytes);

 private:
  uint64_t used_ = 0, limit_;
  WorkBudget* outer_;
};

}  // namespace tandem::jinja
