#include "tests/support/paths.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

std::string model_path(const std::string& file_name) {
  fs::path dir;
  if (const char* m = std::getenv("TANDEM_MODELS"); m && *m) {
    dir = m;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = fs::path(h) / ".cache" / "tandem" / "models";
  }
  fs::path p = dir / file_name;
  return fs::exists(p) ? p.string() : std::string();
}

}  // namespace tandem::test
