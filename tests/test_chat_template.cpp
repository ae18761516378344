// Chat templates (engine/chat/chat_template.hpp and the Jinja interpreter behind it).
//
// The main check is against golden renderings made by Python jinja2 configured exactly as
// Hugging Face transformers configures it (tests/python/chat_template_ref.py golden;
// `check-hf` confirms that configuration against transformers itself): every template in
// tests/data/chat_template/templates/ -- the shipped models' own, well-known model
// families' styles, and feature stress templates -- times every conversation in
// cases.json, with and without add_generation_prompt, must render byte for byte the same,
// or fail where Python fails (with the same message for raise_exception).
// Then: parse errors name the construct and its line:column; runtime errors carry the
// template's message; limits turn runaway templates into errors instead of crashes.
#include <gtest/gtest.h>

#include <chrono>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "engine/chat/chat_template.hpp"
#include "engine/gguf/gguf.hpp"
#include "engine/chat/jinja/jinja_json.hpp"
#include "tests/support/paths.hpp"

using tandem::ChatMessage;
using tandem::ChatTemplate;
using tandem::ChatTemplateError;
namespace jinja = tandem::jinja;
namespace fs = std::filesystem;

namespace {

std::string data_dir() { return (fs::path(tandem::test::source_dir()) / "tests/data/chat_template").string(); }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string template_source(const std::string& name) {
  return read_file((fs::path(data_dir()) / "templates" / (name + ".jinja")).string());
}

struct Golden {
  std::string tmpl, name;
  bool standard = false;
  jinja::Value vars;
  bool has_output = false;
  std::string output, error, error_type;
};

std::vector<Golden> read_golden() {
  std::vector<Golden> out;
  std::ifstream f((fs::path(data_dir()) / "golden.jsonl").string(), std::ios::binary);
  std::string line;
  while (std::getline(f, line)) {
    const jinja::Value rec = jinja::parse_json(line);
    const jinja::Dict& d = rec.dict();
    Golden g;
    g.tmpl = d.find("template")->str();
    g.name = d.find("case")->str();
    g.standard = d.find("standard")->as_bool();
    g.vars = *d.find("vars");
    if (const jinja::Value* o = d.find("output")) {
      g.has_output = true;
      g.output = o->str();
    } else {
      g.error = d.find("error")->str();
      g.error_type = d.find("error_type")->str();
    }
    out.push_back(std::move(g));
  }
  return out;
}

const std::vector<Golden>& golden() {
  static const std::vector<Golden> g = read_golden();
  return g;
}

std::vector<std::string> golden_templates() {
  std::set<std::string> names;
  for (const Golden& g : golden()) names.insert(g.tmpl);
  return {names.begin(), names.end()};
}

// The standard variables as the plain API takes them.
std::vector<ChatMessage> messages_of(const jinja::Value& vars) {
  std::vector<ChatMessage> out;
  for (const jinja::Value& m : vars.dict().find("messages")->list().items) {
    out.push_back({m.dict().find("role")->str(), m.dict().find("content")->str()});
  }
  return out;
}

std::string str_var(const jinja::Value& vars, const char* name) { return vars.dict().find(name)->str(); }

// Runs `render` and describes the outcome as the golden file does.
template <class F>
void expect_matches(const Golden& g, F render, const char* api) {
  SCOPED_TRACE(g.tmpl + " / " + g.name + " via " + api);
  if (g.has_output) {
    try {
      EXPECT_EQ(render(), g.output);
    } catch (const ChatTemplateError& e) {
      ADD_FAILURE() << "unexpected error: " << e.what();
    }
    return;
  }
  try {
    const std::string got = render();
    ADD_FAILURE() << "expected " << g.error_type << " '" << g.error << "', rendered: " << got;
  } catch (const ChatTemplateError& e) {
    if (g.error_type == "TemplateError") {  // raise_exception: the template's own words
      EXPECT_TRUE(e.raised_by_template()) << e.what();
      EXPECT_EQ(e.message(), g.error);
      EXPECT_NE(std::string(e.what()).find(g.error), std::string::npos);
    } else {
      EXPECT_FALSE(e.raised_by_template()) << e.what();
    }
  }
}

}  // namespace

// ---- golden renderings -------------------------------------------------------------------

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, MatchesReference) {
  const ChatTemplate t = ChatTemplate::parse(template_source(GetParam()));
  size_t n = 0;
  for (const Golden& g : golden()) {
    if (g.tmpl != GetParam()) continue;
    ++n;
    const std::string vars_json = jinja::to_json(g.vars);
    expect_matches(g, [&] { return t.render_json(vars_json); }, "render_json");
    if (g.standard) {
      expect_matches(
          g,
          [&] {
            return t.render(messages_of(g.vars), g.vars.dict().find("add_generation_prompt")->as_bool(),
                            str_var(g.vars, "bos_token"), str_var(g.vars, "eos_token"));
          },
          "render");
    }
  }
  EXPECT_GE(n, 24u) << "too few golden cases for " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden, ::testing::ValuesIn(golden_templates()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(ChatTemplateGolden, CoversTheExpectedTemplates) {
  const std::vector<std::string> names = golden_templates();
  for (const char* want : {"smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct",
                           "chatml", "llama3", "llama2", "mistral", "gemma", "gemma3_style", "qwen3_style",
                           "mistral_tools_style", "features_values", "features_text", "features_control",
                           "features_ws", "features_ws_crlf"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // Every template file has goldens.
  for (const auto& e : fs::directory_iterator(fs::path(data_dir()) / "templates")) {
    const std::string stem = e.path().stem().string();
    EXPECT_NE(std::find(names.begin(), names.end(), stem), names.end()) << "no goldens for " << stem;
  }
}

// With Python jinja2 at hand, the committed goldens must be what the reference renders now
// (they are regenerated with `chat_template_ref.py golden`); without it, skipped.
TEST(ChatTemplateGolden, FileIsCurrent) {
  std::string out;
  const int rc = tandem::test::run_python("tests/python/chat_template_ref.py", "check-golden " + data_dir() + " 2>&1",
                                          &out);
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
}

// ---- the shipped models --------------------------------------------------------------------

// One test per model, so that each one's file is required on its own (tests/support/paths.hpp).
namespace {
struct ShippedModel {
  const char* key;   // in scripts/models.json
  const char* tmpl;  // in tests/data/chat_template/templates
};

class ChatTemplateModels : public ::testing::TestWithParam<ShippedModel> {};
}  // namespace

TEST_P(ChatTemplateModels, TemplateFromGgufMatchesTheTestedCopy) {
  const ShippedModel& m = GetParam();
  TANDEM_REQUIRE_MODEL(path, m.key);
  const auto file = tandem::gguf::File::open(path);
  const std::optional<ChatTemplate> t = ChatTemplate::from_gguf(*file);
  ASSERT_TRUE(t.has_value()) << m.key;
  EXPECT_EQ(t->source(), template_source(m.tmpl)) << m.key << " carries a different template than the golden one";
  const std::string prompt = t->render({{"user", "Hi"}}, true, "", "");
  EXPECT_NE(prompt.find("<|im_start|>user\nHi<|im_end|>\n"), std::string::npos) << prompt;
  EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\n")) << prompt;
}

INSTANTIATE_TEST_SUITE_P(Shipped, ChatTemplateModels,
                         ::testing::Values(ShippedModel{"smollm2", "smollm2-135m-instruct"},
                                           ShippedModel{"qwen0.5b", "qwen2.5-coder-0.5b-instruct"},
                                           ShippedModel{"qwen1.5b", "qwen2.5-coder-1.5b-instruct"}),
                         [](const auto& info) {
                           std::string n = info.param.key;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(ChatTemplateGemma3, ModelWithoutTemplateFallsBackToChatML) {
  TANDEM_REQUIRE_MODEL(path, "gemma3");
  const auto file = tandem::gguf::File::open(path);
  const std::optional<ChatTemplate> t = ChatTemplate::from_gguf(*file);
  EXPECT_FALSE(t.has_value());
  const ChatTemplate fallback = t.value_or(tandem::chatml_template());
  EXPECT_EQ(fallback.render({{"system", "S"}, {"user", "U"}}, true, "<bos>", "<eos>"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateApi, ChatMLFallbackIsTheTestedChatML) {
  EXPECT_EQ(tandem::chatml_template().source(), template_source("chatml"));
  EXPECT_EQ(tandem::chatml_template().render({{"user", "a"}, {"assistant", "b"}}, false, "", ""),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n");
}

// ---- errors ----------------------------------------------------------------------------------

struct ParseErrorCase {
  const char* source;
  const char* fragment;  // must appear in the message
  int line, column;
};

TEST(ChatTemplateErrors, UnsupportedOrMalformedFailsAtParseWithPosition) {
  const ParseErrorCase cases[] = {
      {"{% include 'other.jinja' %}", "unsupported statement '{% include %}'", 1, 4},
      {"a\n{% extends 'base' %}", "unsupported statement '{% extends %}'", 2, 4},
      {"{% filter upper %}x{% endfilter %}", "unsupported statement '{% filter %}'", 1, 4},
      {"{% with a = 1 %}{{ a }}{% endwith %}", "unsupported statement '{% with %}'", 1, 4},
      {"line one\n  {{ messages | wordwrap }}", "unsupported filter 'wordwrap'", 2, 17},
      {"{% if x is divisible %}{% endif %}", "unsupported test 'divisible'", 1, 12},
      {"{{ messages[0].content.isdigit() }}", "unsupported method 'isdigit()'", 1, 24},
      {"{% set x = [] %}{{ x.append(1) }}", "unsupported method 'append()'", 1, 22},
      {"{{ cycler('a', 'b') }}", "unsupported function 'cycler()'", 1, 4},
      {"{% for m in messages recursive %}{% endfor %}", "recursive", 1, 22},
      {"{{ messages | map('wordwrap') | list }}", "unsupported filter 'wordwrap'", 1, 19},
      {"{{ messages | selectattr('role', 'bogus') | list }}", "unsupported test 'bogus'", 1, 34},
      {"{{ f(*args) }}", "*args", 1, 6},
      {"{% macro m() %}{{ caller() }}{% endmacro %}", "'caller'", 1, 19},
      {"{% macro m() %}{{ varargs }}{% endmacro %}", "'varargs'", 1, 19},
      {"{% break %}", "'break' outside of a for loop", 1, 4},
      {"{% for m in messages %}\n{% macro x() %}{% continue %}{% endmacro %}{% endfor %}", "outside of a for loop", 2,
       19},
      {"{{ messages[0, 1] }}", "several indices", 1, 14},
      {"{% set 1 = 2 %}", "cannot assign", 1, 8},
      {"{% for a, loop in x %}{% endfor %}", "special loop variable", 1, 11},
      {"{% set true = 2 %}", "cannot assign", 1, 8},
      {"{{ \xc3\xa9t\xc3\xa9 }}", "non-ASCII", 1, 4},
      {"{{ 99999999999999999999 }}", "64-bit", 1, 4},
      {"{{ 'abc\\N{BULLET}' }}", "\\N{...}", 1, 8},
      {"{% for m in messages %}\n  {{ m }}\n", "'for' is never closed: missing {% endfor %}", 1, 4},
      {"{% if true %}{% endfor %}", "unexpected '{% endfor %}'", 1, 17},
      {"{% endif %}", "unexpected '{% endif %}'", 1, 4},
      {"{% bogus %}", "unknown statement '{% bogus %}'", 1, 4},
      {"{{ messages ", "missing '}}'", 1, 1},
      {"x\n\n  {# never closed", "missing end of comment", 3, 3},
      {"{{ 'abc }}", "unterminated string", 1, 4},
      {"{{ }}", "expected an expression", 1, 4},
      {"{{ (1 }}", "unexpected '}', expected ')'", 1, 7},
      {"{{ 1 + }}", "unexpected end of print statement", 1, 8},
      {"{% if %}{% endif %}", "expected an expression, got end of statement", 1, 7},
      {"{% for in messages %}{% endfor %}", "expected an assignment target", 1, 8},
      {"{% set x = 1 2 %}", "expected end of statement '%}'", 1, 14},
      {"{{ x is }}", "expected a name", 1, 9},
      {"{{ f(a=1, 2) }}", "positional argument follows keyword argument", 1, 11},
      {"{% macro m(a=1, b) %}{% endmacro %}", "non-default", 1, 17},
      {"{% raw %}never ends", "missing {% endraw %}", 1, 1},
      {"{{ x is defined is defined }}", "cannot chain tests", 1, 17},
      {"\xe2\x80\x9c\n\xe6\x97\xa5 {{ 'a' | nope }}", "unsupported filter 'nope'", 2, 12},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.source);
    try {
      ChatTemplate::parse(c.source);
      ADD_FAILURE() << "parsed";
    } catch (const ChatTemplateError& e) {
      EXPECT_NE(e.message().find(c.fragment), std::string::npos) << e.what();
      EXPECT_EQ(e.line(), c.line) << e.what();
      EXPECT_EQ(e.column(), c.column) << e.what();
      EXPECT_FALSE(e.raised_by_template());
      const std::string where = std::to_string(c.line) + ":" + std::to_string(c.column);
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplateErrors, RaiseExceptionMessageReachesTheCaller) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}\n"
      "{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Role ' ~ m.role ~ ' is not supported (message ' ~ loop.index ~ ')') }}{% endif %}"
      "{% endfor %}");
  EXPECT_EQ(t.render({{"user", "ok"}}, false, "", ""), "");
  try {
    t.render({{"user", "ok"}, {"tool", "x"}}, false, "", "");
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_EQ(e.message(), "Role tool is not supported (message 2)");
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("Role tool is not supported (message 2)"), std::string::npos);
  }
}

TEST(ChatTemplateErrors, RuntimeErrorsNameThePosition) {
  struct Case {
    const char* source;
    const char* fragment;
    int line, column;
  };
  const Case cases[] = {
      {"{{ missing.attr }}", "'missing' is undefined", 1, 12},
      {"\n  {{ messages[0].content + 1 }}", "can only concatenate str (not \"int\") to str", 2, 26},
      {"{{ messages[0].nope.deeper }}", "'dict object' has no attribute 'nope'", 1, 21},
      {"{{ 1 // 0 }}", "division or modulo by zero", 1, 6},
      {"{% for a, b, c in messages %}{% endfor %}", "not enough values to unpack", 1, 8},
      {"{% set x = 1 %}{% set x.y = 2 %}", "non-namespace", 1, 23},
      {"{{ none | length }}", "has no len()", 1, 11},
      {"{{ messages[0].content[1:2:0] }}", "slice step cannot be zero", 1, 23},
      {"{{ 'a' < 1 }}", "'<' not supported between instances of 'str' and 'int'", 1, 8},
      {"{{ undefined_function() }}", "'undefined_function' is undefined", 1, 22},
      {"{{ 'x'.split('') }}", "empty separator", 1, 13},
      {"{{ '%s' % 1 }}", "printf-style", 1, 9},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow", 1, 24},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    const ChatTemplate t = ChatTemplate::parse(c.source);
    try {
      t.render({{"user", "hello"}}, false, "", "");
      ADD_FAILURE() << "rendered";
    } catch (const ChatTemplateError& e) {
      EXPECT_NE(e.message().find(c.fragment), std::string::npos) << e.what();
      EXPECT_EQ(e.line(), c.line) << e.what();
      EXPECT_EQ(e.column(), c.column) << e.what();
      EXPECT_FALSE(e.raised_by_template());
    }
  }
}

TEST(ChatTemplateErrors, UndefinedIsLenientWhenOnlyPrintedOrTested) {
  const ChatTemplate t = ChatTemplate::parse(
      "[{{ missing }}][{{ messages[0].nope }}][{{ messages[7] }}][{{ missing is defined }}]"
      "[{{ missing | default('d') }}][{% if missing %}yes{% else %}no{% endif %}][{{ missing | length }}]"
      "[{% for x in missing %}{{ x }}{% else %}empty{% endfor %}][{{ tools }}][{{ 'a' ~ missing ~ 'b' }}]");
  EXPECT_EQ(t.render({{"user", "u"}}, false, "", ""), "[][][][False][d][no][0][empty][None][ab]");
}

TEST(ChatTemplateErrors, BadVariablesJson) {
  const ChatTemplate t = tandem::chatml_template();
  EXPECT_THROW(t.render_json("{\"messages\": ["), ChatTemplateError);
  EXPECT_THROW(t.render_json("[1, 2]"), ChatTemplateError);
  EXPECT_THROW(t.render_json("{\"messages\": \"\\ud800\"}"), ChatTemplateError);
  EXPECT_EQ(t.render_json("{\"messages\": [{\"role\": \"user\", \"content\": \"\\u00e9\\ud83d\\ude00\"}]}"),
            "<|im_start|>user\n\xc3\xa9\xf0\x9f\x98\x80<|im_end|>\n");
}

// ---- limits: runaway templates fail cleanly ------------------------------------------------

namespace {

void expect_limit(const std::string& source, const char* fragment, bool at_parse) {
  SCOPED_TRACE(source.substr(0, 120));
  try {
    const ChatTemplate t = ChatTemplate::parse(source);
    EXPECT_FALSE(at_parse) << "parsed";
    t.render({{"user", "hello"}}, true, "", "");
    ADD_FAILURE() << "rendered";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
  }
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST(ChatTemplateLimits, DeepNestingIsAParseError) {
  expect_limit("{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}", "nested too deeply", true);
  expect_limit("{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}", "nested too deeply", true);
  expect_limit("{{ " + repeat("not ", 5000) + "1 }}", "nested too deeply", true);
  expect_limit("{{ " + repeat("-", 5000) + "1 }}", "nested too deeply", true);
  expect_limit(repeat("{% if true %}", 2000) + "x" + repeat("{% endif %}", 2000), "nested too deeply", true);
  expect_limit("{{ 1" + repeat(" + 1", 5000) + " }}", "nested too deeply", true);
  expect_limit("{{ 'x'" + repeat(" | trim", 5000) + " }}", "nested too deeply", true);
  expect_limit("{{ messages" + repeat(".a", 5000) + " }}", "nested too deeply", true);
  expect_limit("{{ 1 if x else " + repeat("1 if x else ", 5000) + "2 }}", "nested too deeply", true);
  // Nesting within the limits, and long but flat constructs, are fine.
  const ChatTemplate nested = ChatTemplate::parse("{{ " + repeat("[", 90) + repeat("]", 90) + " | tojson }}" +
                                                  repeat("{% if true %}", 90) + "x" + repeat("{% endif %}", 90));
  EXPECT_EQ(nested.render({}, false, "", ""), repeat("[", 90) + repeat("]", 90) + "x");
  const ChatTemplate flat = ChatTemplate::parse("{{ 'a'" + repeat(" ~ 'a'", 5000) + " }}" + repeat("{{ 1 }}", 5000));
  EXPECT_EQ(flat.render({}, false, "", "").size(), 5001u + 5000u);
}

TEST(ChatTemplateLimits, RunawayRenderingIsAnError) {
  // Loop iterations and the items built-ins go through share one budget (10 million).
  expect_limit("{% for i in range(100000) %}{% set r = range(100000) %}{% endfor %}", "loop iterations", false);
  expect_limit("{{ range(1000000) | length }}", "Range too big", false);
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion too deep", false);
  expect_limit("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "exceeds the limit", false);
  expect_limit("{{ 'x' * 1000000000000 }}", "exceeds the limit", false);
  expect_limit("{{ [1] * 1000000000000 }}", "exceeds the limit", false);
  expect_limit("{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}", "output exceeds the limit", false);
  expect_limit("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}",
               "nested deeper", false);
  expect_limit("{% set ns = namespace() %}{% set ns.me = [ns] %}", "namespace inside itself", false);
  expect_limit("{% for i in range(100000) %}{% macro m() %}{% endmacro %}{% endfor %}", "too many macro definitions",
               false);
}

// Runaway templates that stay under the iteration, size and nesting limits still end,
// and soon: every string and list built counts against one budget per render (1 GiB).
TEST(ChatTemplateLimits, HugeLoopsAndCopyingEndWithAClearError) {
  const auto t0 = std::chrono::steady_clock::now();
  expect_limit("{% for i in range(10**9) %}x{% endfor %}", "Range too big", false);
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop iterations",
               false);
  // 100000 copies of a 60 MB string: each is within the 64 MiB string limit.
  expect_limit("{% for i in range(100000) %}{% set s = 'x' * 60000000 %}{% endfor %}", "bytes of strings and lists",
               false);
  expect_limit("{% set s = 'x' * 30000000 %}{% for i in range(100000) %}{% set t = s ~ s %}{% endfor %}",
               "bytes of strings and lists", false);
  expect_limit("{% set s = 'x' * 30000000 %}{% for i in range(100000) %}{% set t = s + s %}{% endfor %}",
               "bytes of strings and lists", false);
  expect_limit("{% set l = [0] * 500000 %}{% for i in range(100000) %}{% set m = l + l %}{% endfor %}",
               "bytes of strings and lists", false);
  expect_limit("{% for i in range(100000) %}{% set m = [0, 1] * 500000 %}{% endfor %}", "bytes of strings and lists",
               false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 60.0);  // about a second in a release build; minutes or forever without the budget
}

TEST(ChatTemplateLimits, OutputLimitIsConfigurable) {
  ChatTemplate t = ChatTemplate::parse("{% for i in range(100) %}0123456789{% endfor %}");
  EXPECT_EQ(t.max_output_bytes(), ChatTemplate::default_max_output_bytes());
  EXPECT_EQ(t.render({}, false, "", "").size(), 1000u);
  t.set_max_output_bytes(1000);
  EXPECT_EQ(t.render({}, false, "", "").size(), 1000u);
  t.set_max_output_bytes(999);
  try {
    t.render({}, false, "", "");
    ADD_FAILURE() << "rendered past the limit";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(e.message().find("output exceeds the limit of 999 bytes"), std::string::npos) << e.what();
  }
  t.set_max_output_bytes(size_t{1} << 40);  // capped at the interpreter's own limit
  EXPECT_EQ(t.max_output_bytes(), ChatTemplate::default_max_output_bytes());
}

TEST(ChatTemplateLimits, IterationAndWorkLimitsAreConfigurable) {
  ChatTemplate t = ChatTemplate::parse("{% for i in range(300) %}{% endfor %}ok");
  const ChatTemplate::Limits d = ChatTemplate::default_limits();
  EXPECT_EQ(t.limits().max_loop_iterations, 10'000'000u);
  EXPECT_EQ(t.limits().max_work_bytes, uint64_t{1} << 30);
  EXPECT_EQ(t.render({}, false, "", ""), "ok");
  t.set_limits({d.max_output_bytes, 299, d.max_work_bytes});
  try {
    t.render({}, false, "", "");
    ADD_FAILURE() << "ran past the iteration limit";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(e.message().find("limit of 299 loop iterations"), std::string::npos) << e.what();
  }
  t.set_limits({d.max_output_bytes, 1000, d.max_work_bytes});  // the loop and range()'s items
  EXPECT_EQ(t.render({}, false, "", ""), "ok");

  // Building strings: 20 copies of a 10 kB string is about 200 kB of work.
  ChatTemplate w = ChatTemplate::parse("{% set s = 'x' * 10000 %}{% for i in range(20) %}{% set t = s ~ i %}{% endfor %}ok");
  EXPECT_EQ(w.render({}, false, "", ""), "ok");
  w.set_limits({d.max_output_bytes, d.max_loop_iterations, 100'000});
  try {
    w.render({}, false, "", "");
    ADD_FAILURE() << "ran past the work limit";
  } catch (const ChatTemplateError& e) {
    EXPECT_NE(e.message().find("limit of 100000"), std::string::npos) << e.what();
  }
  // The output limit is still capped.
  w.set_limits({size_t{1} << 40, 1, 1});
  EXPECT_EQ(w.limits().max_output_bytes, ChatTemplate::default_max_output_bytes());
}

TEST(ChatTemplateLimits, DeepJsonVariablesAreRefused) {
  const ChatTemplate t = tandem::chatml_template();
  EXPECT_THROW(t.render_json("{\"messages\": " + repeat("[", 100000) + repeat("]", 100000) + "}"),
               ChatTemplateError);
}

// ---- API properties ---------------------------------------------------------------------------

TEST(ChatTemplateApi, CopiesShareOneParseAndRenderConcurrently) {
  const ChatTemplate t = ChatTemplate::parse(template_source("qwen3_style"));
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "U1"}, {"assistant", "A"}, {"user", "U2"}};
  const std::string want = t.render(msgs, true, "", "");
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k, copy = t] {
      for (int i = 0; i < 50; ++i) ok[k] += copy.render(msgs, true, "", "") == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_EQ(v, 50);
}

TEST(ChatTemplateApi, StrftimeNowUsesLocalTime) {
  const ChatTemplate t = ChatTemplate::parse("{{ strftime_now('%Y') }}|{{ strftime_now('') }}");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  EXPECT_EQ(t.render({}, false, "", ""), std::to_string(1900 + local.tm_year) + "|");
}

TEST(ChatTemplateApi, InputBytesPassThroughUnchanged) {
  // Ill-formed UTF-8 in a message is not Python-representable; it is copied as is.
  const ChatTemplate t = ChatTemplate::parse("{{ messages[0].content }}|{{ messages[0].content | length }}");
  EXPECT_EQ(t.render({{"user", "a\xff" "b\xe2\x82"}}, false, "", ""), "a\xff" "b\xe2\x82|4");
}
