#include "tests/support/paths.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace tandem::test {

std::string source_dir() { return TANDEM_SOURCE_DIR; }

std::string scratch_dir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  // The process id keeps parallel ctest processes (one per test case) out of each other's way.
  fs::path p = fs::path(tmp && *tmp ? tmp : "/tmp") / ("tandem-test-" + std::to_string(getpid()) + "-" + name);
  std::error_code ec;
  fs::remove_all(p, ec);
  fs::create_directories(p);
  return p.string();
}

std::string python() {
  if (const char* p = std::getenv("TANDEM_PYTHON"); p && *p) return p;
  std::string configured = TANDEM_PYTHON;
  return configured.empty() ? "python3" : configured;
}

int run_python(const std::string& script_rel, const std::string& args, std::string* out) {
  std::string cmd = python() + " " + (fs::path(source_dir()) / script_rel).string() + " " + args;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  std::string buf;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf.append(chunk, n);
  int rc = pclose(f);
  if (out) *out = std::move(buf);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

ModelPolicy model_policy_from_env() {
  ModelPolicy p;
  if (const char* m = std::getenv("TANDEM_MODELS"); m && *m) {
    p.dir = m;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    p.dir = (fs::path(h) / ".cache" / "tandem" / "models").string();
  }
  if (const char* s = std::getenv("TANDEM_TEST_MODELS"); s && *s) p.set = s;
  const char* a = std::getenv("TANDEM_ALLOW_SKIP");
  p.allow_skip = a && std::string_view(a) == "1";
  return p;
}

const std::vector<std::pair<std::string, std::string>>& model_manifest() {
  static const std::vector<std::pair<std::string, std::string>> m = [] {
    const fs::path file = fs::path(source_dir()) / "scripts" / "models.json";
    std::ifstream in(file);
    if (!in) throw std::runtime_error("cannot read " + file.string());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::pair<std::string, std::string>> out;
    const boost::json::value manifest = boost::json::parse(text);
    for (const auto& [key, model] : manifest.at("models").as_object())
      out.emplace_back(std::string(key), std::string(model.at("file").as_string()));
    return out;
  }();
  return m;
}

ModelLookup find_model(const std::string& key, const ModelPolicy& policy) {
  const auto& manifest = model_manifest();
  std::string known;
  for (const auto& [k, f] : manifest) known += (known.empty() ? "" : ", ") + k;
  auto is_known = [&](std::string_view k) {
    return std::any_of(manifest.begin(), manifest.end(), [&](const auto& e) { return e.first == k; });
  };
  ModelLookup r;
  r.fail = true;
  if (!is_known(key)) {
    r.message = "the test names an unknown model '" + key + "' (scripts/models.json has: " + known + ")";
    return r;
  }
  // The set of this run: "all", "none", or keys; every key must exist.
  bool in_set = false;
  if (policy.set == "all") {
    in_set = true;
  } else if (policy.set != "none") {
    std::string_view rest = policy.set;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view k = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      while (!k.empty() && k.front() == ' ') k.remove_prefix(1);
      while (!k.empty() && k.back() == ' ') k.remove_suffix(1);
      if (k.empty()) continue;
      if (!is_known(k)) {
        r.message = "TANDEM_TEST_MODELS=" + policy.set + " names an unknown model '" + std::string(k) +
                    "' (known: " + known + ", or all, none)";
        return r;
      }
      in_set |= k == key;
    }
  }
  if (!in_set) {
    r.fail = false;
    r.message = "model '" + key + "' is not in this run's model set (TANDEM_TEST_MODELS=" + policy.set + ")";
    return r;
  }
  const std::string& file =
      std::find_if(manifest.begin(), manifest.end(), [&](const auto& e) { return e.first == key; })->second;
  const fs::path p = fs::path(policy.dir) / file;
  if (fs::exists(p)) {
    r.fail = false;
    r.path = p.string();
    return r;
  }
  const std::string fetch = "python3 scripts/fetch_models.py --models " + key;
  if (policy.allow_skip) {
    r.fail = false;
    r.message = "model '" + key + "' not downloaded (" + p.string() + "); skipped because TANDEM_ALLOW_SKIP=1. To test it: " + fetch;
  } else {
    r.message = "model '" + key + "' not downloaded (" + p.string() + "). Run: " + fetch +
                " — or set TANDEM_ALLOW_SKIP=1 to skip the tests of missing models deliberately, or leave '" + key +
                "' out of TANDEM_TEST_MODELS (now " + policy.set + ")";
  }
  return r;
}

}  // namespace tandem::test
