// Paths the tests need: the source tree (for Python reference scripts), a scratch
// directory per test, the Python interpreter, and the model cache.
#pragma once
#include <string>

namespace tandem::test {

std::string source_dir();
// A fresh, empty directory for the current test process (removed and recreated each call).
std::string scratch_dir(const std::string& name);
// The python3 that scripts/setup.sh installed the references (gguf, numpy) into.
std::string python();
// Runs `python <script> args...` from the source tree; returns exit code, captures stdout.
int run_python(const std::string& script_rel, const std::string& args, std::string* out = nullptr);
// Directory of the model cache (TANDEM_MODELS or ~/.cache/tandem/models); the file for a
// model name such as "smollm2-135m-instruct-q4_1.gguf", or "" when it is not downloaded.
std::string model_path(const std::string& file_name);

}  // namespace tandem::test
