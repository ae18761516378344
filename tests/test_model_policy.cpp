// The policy for model-level tests whose model is missing (tests/support/paths.hpp): outside
// the run's model set they skip, inside it they fail unless TANDEM_ALLOW_SKIP=1, and unknown
// model keys fail. Also the message a user sees: it must name the fetch command.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>

#include "tests/support/paths.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using test::find_model;
using test::ModelPolicy;

// A model cache holding only SmolLM2's file (empty: only its existence is looked at).
ModelPolicy policy_with_smollm2(const std::string& set, bool allow_skip) {
  ModelPolicy p;
  p.dir = test::scratch_dir("model-policy");
  std::ofstream(fs::path(p.dir) / "smollm2-135m-instruct-q4_1.gguf") << "";
  p.set = set;
  p.allow_skip = allow_skip;
  return p;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ModelPolicy, ManifestListsTheFetchableModels) {
  const auto& m = test::model_manifest();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].first, "smollm2");
  EXPECT_EQ(m[0].second, "smollm2-135m-instruct-q4_1.gguf");
  for (const char* key : {"qwen0.5b", "qwen1.5b", "gemma3"})
    EXPECT_TRUE(std::any_of(m.begin(), m.end(), [&](const auto& e) { return e.first == key; })) << key;
}

TEST(ModelPolicy, PresentModelInTheSetRuns) {
  for (const char* set : {"all", "smollm2", "qwen0.5b, smollm2"}) {
    const auto r = find_model("smollm2", policy_with_smollm2(set, false));
    EXPECT_TRUE(r.path.ends_with("/smollm2-135m-instruct-q4_1.gguf")) << set << ": " << r.message;
    EXPECT_FALSE(r.fail);
  }
}

TEST(ModelPolicy, MissingModelInTheSetFailsNamingTheFetchCommand) {
  for (const char* set : {"all", "qwen1.5b", "smollm2,qwen1.5b"}) {
    const auto r = find_model("qwen1.5b", policy_with_smollm2(set, false));
    EXPECT_TRUE(r.path.empty());
    EXPECT_TRUE(r.fail) << set;
    EXPECT_TRUE(contains(r.message, "python3 scripts/fetch_models.py --models qwen1.5b")) << r.message;
    EXPECT_TRUE(contains(r.message, "TANDEM_ALLOW_SKIP=1")) << r.message;
    EXPECT_TRUE(contains(r.message, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")) << r.message;
  }
}

TEST(ModelPolicy, MissingModelSkipsOnlyWhenAllowed) {
  const auto r = find_model("gemma3", policy_with_smollm2("all", true));
  EXPECT_TRUE(r.path.empty());
  EXPECT_FALSE(r.fail);
  EXPECT_TRUE(contains(r.message, "TANDEM_ALLOW_SKIP=1")) << r.message;
  EXPECT_TRUE(contains(r.message, "python3 scripts/fetch_models.py --models gemma3")) << r.message;
}

TEST(ModelPolicy, ModelOutsideTheSetSkipsSayingSo) {
  for (const char* set : {"smollm2", "none"}) {
    const auto r = find_model("qwen0.5b", policy_with_smollm2(set, false));
    EXPECT_TRUE(r.path.empty());
    EXPECT_FALSE(r.fail) << set;
    EXPECT_TRUE(contains(r.message, "not in this run's model set (TANDEM_TEST_MODELS=" + std::string(set) + ")"))
        << r.message;
  }
  // Even when its file is there: the run said which models it covers.
  EXPECT_TRUE(find_model("smollm2", policy_with_smollm2("none", false)).path.empty());
}

TEST(ModelPolicy, UnknownKeysFail) {
  auto r = find_model("smollm2", policy_with_smollm2("smolm2", false));  // a typo in the set
  EXPECT_TRUE(r.fail);
  EXPECT_TRUE(contains(r.message, "unknown model 'smolm2'")) << r.message;
  r = find_model("llama3", policy_with_smollm2("all", true));  // a typo in a test
  EXPECT_TRUE(r.fail);
  EXPECT_TRUE(contains(r.message, "unknown model 'llama3'")) << r.message;
}

// Sets an environment variable for one scope and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ModelPolicy, ReadsTheEnvironment) {
  {
    ScopedEnv m("TANDEM_MODELS", "/models/here"), s("TANDEM_TEST_MODELS", "smollm2"), a("TANDEM_ALLOW_SKIP", "1");
    const auto p = test::model_policy_from_env();
    EXPECT_EQ(p.dir, "/models/here");
    EXPECT_EQ(p.set, "smollm2");
    EXPECT_TRUE(p.allow_skip);
  }
  ScopedEnv m("TANDEM_MODELS", nullptr), h("HOME", "/home/x"), s("TANDEM_TEST_MODELS", nullptr),
      a("TANDEM_ALLOW_SKIP", "yes");  // only "1" counts: skipping must be deliberate
  const auto p = test::model_policy_from_env();
  EXPECT_EQ(p.dir, "/home/x/.cache/tandem/models");
  EXPECT_EQ(p.set, "all");
  EXPECT_FALSE(p.allow_skip);
}

}  // namespace
}  // namespace tandem
