// Paths the tests need: the source tree (for Python reference scripts), a scratch
// directory per test, the Python interpreter, and the real models (with the policy for
// tests whose model is missing).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

std::string source_dir();
// A fresh, empty directory for the current test process (removed and recreated each call).
std::string scratch_dir(const std::string& name);
// The python3 that scripts/setup.sh installed the references (gguf, numpy) into.
std::string python();
// Runs `python <script> args...` from the source tree; returns exit code, captures stdout.
int run_python(const std::string& script_rel, const std::string& args, std::string* out = nullptr);

// ---- the real models -----------------------------------------------------------------------
// Model-level tests name a model by its key in scripts/models.json ("smollm2", "qwen0.5b",
// "qwen1.5b", "gemma3"; scripts/fetch_models.py downloads it). A test whose model is missing
// must not pass as "skipped" unnoticed, so:
//   * TANDEM_TEST_MODELS (comma-separated keys; "all", the default; "none") is the model set
//     of this run. A test of a model outside the set is skipped, saying so: a run limited on
//     purpose (scripts/test.sh covers only SmolLM2 under ASan).
//   * A model inside the set whose file is missing fails the test, naming the fetch command —
//     unless TANDEM_ALLOW_SKIP=1 deliberately accepts skipping it.
//   * An unknown key (in TANDEM_TEST_MODELS or in a test) fails: a typo must not skip tests.
// tests/python/test_server.py applies the same policy.
struct ModelPolicy {
  std::string dir;              // the model cache: TANDEM_MODELS, else ~/.cache/tandem/models
  std::string set = "all";      // TANDEM_TEST_MODELS as given
  bool allow_skip = false;      // TANDEM_ALLOW_SKIP=1
};
ModelPolicy model_policy_from_env();

struct ModelLookup {
  std::string path;     // the model's file; empty when the test cannot run
  bool fail = false;    // with no path: fail (true) or skip (false) the test
  std::string message;  // with no path: why, and what to do about it
};
ModelLookup find_model(const std::string& key, const ModelPolicy& policy = model_policy_from_env());

// key -> file name, as scripts/models.json lists them (read once).
const std::vector<std::pair<std::string, std::string>>& model_manifest();

}  // namespace tandem::test

// In a test body: declares `const std::string& var`, the path of model `key`, or ends the
// test here, failing or skipping it as find_model() decides.
#define TANDEM_REQUIRE_MODEL(var, key)                                                   \
  const ::tandem::test::ModelLookup var##_lookup_ = ::tandem::test::find_model(key);     \
  if (var##_lookup_.path.empty()) {                                                      \
    if (var##_lookup_.fail) FAIL() << var##_lookup_.message;                             \
    GTEST_SKIP() << var##_lookup_.message;                                               \
  }                                                                                      \
  const std::string& var = var##_lookup_.path
