// Runs a parsed chat template: statements in jinja_exec.cpp, expressions in
// jinja_eval.cpp.
//
// Scoping follows Jinja: {% if %} shares its scope; every iteration of a for loop gets a
// fresh scope whose assignments vanish when the iteration ends (hence namespace());
// macros see their parameters over the scope they were defined in.
//
// Limits turn runaway templates into errors: total loop iterations, recursion depth
// (nested calls of macros and evaluation), and the size of strings and of the output.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/jinja/jinja_ast.hpp"
#include "engine/chat/jinja/jinja_value.hpp"

namespace tandem::jinja {

struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(std::string_view name) const;  // here or in a parent
  void set(const std::string& name, Value v);      // here
};
using FramePtr = std::shared_ptr<Frame>;

// The budgets of one render (ChatTemplate::Limits sets them; the defaults suit any real
// template, which renders in well under a thousandth of each).
struct Limits {
  size_t max_output = kMaxStringBytes;          // output bytes; at most kMaxStringBytes
  uint64_t max_iterations = 10'000'000;         // loop iterations and built-in item work
  uint64_t max_work_bytes = kMaxWorkBytes;      // strings and list slots built, all together
};

class Interpreter {
 public:
  static constexpr int kMaxRecursion = 1000;         // nested evaluation / statement / macro frames
  static constexpr size_t kMaxMacroScopes = 10'000;  // distinct scopes that defined macros

  explicit Interpreter(const ast::Template& t, Limits limits = {}) : tpl_(t), limits_(limits) {
    limits_.max_output = std::min(limits_.max_output, kMaxStringBytes);
  }
  // Renders with the given top-level variables (over the built-in globals).
  std::string render(const Dict& variables);

  // For built-ins.
  void tick(uint64_t n = 1);
  Value call(const Value& callee, Args& args);
  Value call_macro(const ast::Macro& m, const FramePtr& scope, Args& args);

 private:
  enum class Flow { Normal, Break, Continue };
  struct RecursionGuard {
    explicit RecursionGuard(Interpreter& in);
    ~RecursionGuard() { --in.depth_; }
    Interpreter& in;
  };

  // jinja_exec.cpp
  Flow exec_body(const ast::Body& body, const FramePtr& frame, std::string& out);
  Flow exec(const ast::Stmt& s, const FramePtr& frame, std::string& out);
  Flow exec_if(const ast::If& s, const FramePtr& frame, std::string& out);
  Flow exec_for(const ast::For& s, const FramePtr& frame, std::string& out);
  Flow exec_set_block(const ast::SetBlock& s, const FramePtr& frame);
  void assign(const ast::Target& t, Value v, Frame& frame);
  void append_output(std::string& out, std::string_view text);

  // jinja_eval.cpp
  Value eval(const ast::Expr& e, Frame& frame);
  Value eval_inner(const ast::Expr& e, Frame& frame);
  Value eval_name(const ast::Name& e, Frame& frame);
  Value eval_list(const ast::ListExpr& e, Frame& frame);
  Value eval_dict(const ast::DictExpr& e, Frame& frame);
  Value eval_slice(const ast::Slice& e, Frame& frame);
  Value eval_call(const ast::Call& e, Frame& frame);
  Value eval_compare(const ast::Compare& e, Frame& frame);
  Value eval_concat(const ast::Concat& e, Frame& frame);
  Args eval_args(const ast::CallArgs& a, Frame& frame);

 public:
  // Also used by exec for {% set x | filter %} blocks.
  Value apply_filter_node(const ast::Filter& f, Value input, Frame& frame);
  bool apply_test_node(const ast::Test& t, Frame& frame);

 private:
  const ast::Template& tpl_;
  Limits limits_;
  std::vector<FramePtr> pinned_;  // frames that defined macros: macros point into them
  uint64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace tandem::jinja
