// Statement execution for the chat-template interpreter: output, if, for, set, macros.
#include "engine/chat/jinja/jinja_builtins.hpp"
#include "engine/chat/jinja/jinja_interp.hpp"
#include "engine/chat/jinja/jinja_ops.hpp"

namespace tandem::jinja {

using namespace ast;

const Value* Frame::find(std::string_view name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    for (const auto& [n, v] : f->vars) {
      if (n == name) return &v;
    }
  }
  return nullptr;
}

void Frame::set(const std::string& name, Value v) {
  for (auto& [n, x] : vars) {
    if (n == name) {
      x = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

namespace {

// A {% macro %}: calling it renders its body with the arguments bound. It refers to its
// defining scope weakly; the interpreter keeps that scope alive for the whole render,
// and a strong reference would be a cycle (the scope holds the macro).
class MacroFunction : public Function {
 public:
  MacroFunction(const Macro& m, std::weak_ptr<Frame> scope) : m_(m), scope_(std::move(scope)) {}
  std::string_view name() const override { return m_.name; }
  Value call(Interpreter& in, Args& args) const override {
    const FramePtr scope = scope_.lock();
    if (!scope) throw Error("macro '" + m_.name + "' called after its render ended");
    return in.call_macro(m_, scope, args);
  }

 private:
  const Macro& m_;
  std::weak_ptr<Frame> scope_;
};

FramePtr child_of(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

}  // namespace

std::string Interpreter::render(const Dict& variables) {
  auto globals = std::make_shared<Frame>();
  for (const auto& [k, v] : global_functions().entries) globals->set(k.str(), v);
  for (const auto& [k, v] : variables.entries) {
    if (!k.is_string()) throw Error("template variable names must be strings");
    globals->set(k.str(), v);
  }
  iterations_ = 0;
  depth_ = 0;
  WorkBudget budget(limits_.max_work_bytes);
  std::string out;
  exec_body(tpl_.body, child_of(globals), out);
  pinned_.clear();
  return out;
}

void Interpreter::append_output(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output) {
    throw Error("template output exceeds the limit of " + std::to_string(limits_.max_output) + " bytes");
  }
  charge_work(text.size());
  out.append(text);
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const FramePtr& frame, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec(*s, frame, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const FramePtr& frame, std::string& out) {
  RecursionGuard guard(*this);
  try {
    switch (s.kind) {
      case StmtKind::Text: append_output(out, static_cast<const Text&>(s).text); break;
      case StmtKind::Print: append_output(out, to_str(eval(*static_cast<const Print&>(s).expr, *frame))); break;
      case StmtKind::If: return exec_if(static_cast<const If&>(s), frame, out);
      case StmtKind::For: return exec_for(static_cast<const For&>(s), frame, out);
      case StmtKind::Set: {
        const auto& set = static_cast<const Set&>(s);
        assign(set.target, eval(*set.value, *frame), *frame);
        break;
      }
      case StmtKind::SetBlock: return exec_set_block(static_cast<const SetBlock&>(s), frame);
      case StmtKind::Macro: {
        const auto& m = static_cast<const Macro&>(s);
        frame->set(m.name, Value::function(std::make_shared<MacroFunction>(m, frame)));
        if (pinned_.empty() || pinned_.back() != frame) {
          // Each pinned scope lives until the render ends; a macro defined inside a long
          // loop would pin one per iteration.
          if (pinned_.size() >= kMaxMacroScopes) {
            throw Error("too many macro definitions executed (limit " + std::to_string(kMaxMacroScopes) + ")");
          }
          pinned_.push_back(frame);
        }
        break;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::Block: return exec_body(static_cast<const Block&>(s).body, frame, out);
    }
  } catch (Error& err) {
    if (err.pos == Error::kNoPos) err.pos = s.pos;
    throw;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_if(const If& s, const FramePtr& frame, std::string& out) {
  for (const auto& [cond, body] : s.branches) {
    if (truthy(eval(*cond, *frame))) return exec_body(body, frame, out);
  }
  return exec_body(s.otherwise, frame, out);
}

Interpreter::Flow Interpreter::exec_for(const For& s, const FramePtr& frame, std::string& out) {
  std::vector<Value> items = ops::iterate(eval(*s.iter, *frame));
  if (s.filter) {
    // `for x in xs if cond`: loop.index, loop.length, ... count the kept items only.
    std::vector<Value> kept;
    FramePtr f;
    for (Value& v : items) {
      tick();
      if (f && f.use_count() == 1) {
        f->vars.clear();
      } else {
        f = child_of(frame);
      }
      assign(s.target, v, *f);
      if (truthy(eval(*s.filter, *f))) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  // The else body runs when nothing was iterated; a break or continue in it belongs to
  // an enclosing loop.
  if (items.empty()) return exec_body(s.otherwise, child_of(frame), out);
  // One loop object for the whole loop, advanced in place, as Jinja's LoopContext is.
  auto info = std::make_shared<LoopInfo>();
  info->items = std::make_shared<const std::vector<Value>>(std::move(items));
  const Value loop = Value::loop(info);
  FramePtr f;
  for (size_t i = 0; i < info->items->size(); ++i) {
    tick();
    info->index0 = i;
    // A fresh scope per iteration: what the body sets is gone in the next one. The
    // previous iteration's frame is recycled unless something (a macro) still holds it.
    if (f && f.use_count() == 1) {
      f->vars.clear();
    } else {
      f = child_of(frame);
    }
    f->set("loop", loop);
    assign(s.target, (*info->items)[i], *f);
    if (exec_body(s.body, f, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_set_block(const SetBlock& s, const FramePtr& frame) {
  std::string captured;
  const Flow f = exec_body(s.body, child_of(frame), captured);  // the body's own sets stay inside
  if (f != Flow::Normal) return f;
  Value v = Value::string(std::move(captured));
  for (const auto& filter : s.filters) v = apply_filter_node(*filter, std::move(v), *frame);
  assign(s.target, std::move(v), *frame);
  return Flow::Normal;
}

void Interpreter::assign(const Target& t, Value v, Frame& frame) {
  if (!t.attr.empty()) {
    const Value* ns = frame.find(t.name);
    if (!ns || ns->kind() != Value::Kind::Namespace) {
      throw Error("cannot assign attribute on non-namespace object", t.pos);
    }
    if (t.attr.starts_with("_")) {
      // transformers' namespace refuses these (they could reach Python internals).
      throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + t.attr +
                      "'. Please rename the attribute.",
                  t.pos);
    }
    namespace_set(*ns, t.attr, std::move(v));
    return;
  }
  if (!t.name.empty()) {
    frame.set(t.name, std::move(v));
    return;
  }
  const std::vector<Value> items = ops::iterate(v);
  if (items.size() != t.items.size()) {
    const std::string n = std::to_string(t.items.size());
    throw Error(items.size() > t.items.size()
                    ? "too many values to unpack (expected " + n + ")"
                    : "not enough values to unpack (expected " + n + ", got " + std::to_string(items.size()) + ")",
                t.pos);
  }
  for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], frame);
}

Value Interpreter::call_macro(const Macro& m, const FramePtr& scope, Args& args) {
  RecursionGuard guard(*this);
  const FramePtr f = child_of(scope);
  const size_t n = m.params.size();
  if (args.positional.size() > n) {
    throw Error("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  }
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    f->set(m.params[i], std::move(args.positional[i]));
    bound[i] = true;
  }
  for (auto& [name, v] : args.named) {
    size_t i = 0;
    while (i < n && m.params[i] != name) ++i;
    if (i == n) throw Error("macro '" + m.name + "' takes no keyword argument '" + name + "'");
    if (bound[i]) throw Error("macro '" + m.name + "' got multiple values for argument '" + name + "'");
    f->set(name, std::move(v));
    bound[i] = true;
  }
  // Defaults are evaluated at call time, in the macro's scope (they may use earlier
  // parameters); a parameter without one is Undefined.
  const size_t first_default = n - m.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    f->set(m.params[i], i >= first_default ? eval(*m.defaults[i - first_default], *f)
                                           : Value::undefined("parameter '" + m.params[i] + "' was not provided"));
  }
  std::string out;
  exec_body(m.body, f, out);
  return Value::string(std::move(out));
}

}  // namespace tandem::jinja
