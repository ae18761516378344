// The chat-template interpreter: arbitrary templates rendered over arbitrary messages and
// variables. Templates come from model files people download, so parse and render must
// end — soon and within bounded memory — with text or a ChatTemplateError, whatever the
// template does (bench/fuzz.sh runs this with -timeout and -rss_limit_mb to hold it to
// that).
//
// Input: the template, then optionally "\n@@VARS@@\n" and a JSON object of variables
// (rendered with render_json), else rendered with render() over messages cut from the
// template's own bytes.
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/chat_template.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n@@VARS@@\n";
  const size_t sep = in.find(kSep);
  const std::string_view source = in.substr(0, sep);
  std::optional<ChatTemplate> t;
  try {
    t = ChatTemplate::parse(source);
  } catch (const ChatTemplateError&) {
    return 0;
  }
  constexpr size_t kMaxOut = 1 << 20;
  t->set_limits({kMaxOut, kFuzzTemplateIterations, kFuzzTemplateWorkBytes});
  try {
    std::string out;
    if (sep != std::string_view::npos) {
      out = t->render_json(in.substr(sep + kSep.size()));
    } else {
      // Messages from slices of the input: odd bytes, Unicode, whatever the fuzzer wrote.
      std::vector<ChatMessage> msgs;
      static const char* const kRoles[] = {"system", "user", "assistant", "tool", "user"};
      const size_t n = std::min<size_t>(source.size() % 5, 4);
      for (size_t i = 0; i < n; ++i) {
        const size_t a = source.size() * i / 5, b = source.size() * (i + 1) / 5;
        msgs.push_back({kRoles[i], std::string(source.substr(a, b - a))});
      }
      out = t->render(msgs, source.size() % 2 == 0, "<s>", "</s>");
    }
    fuzz_check(out.size() <= kMaxOut);
  } catch (const ChatTemplateError&) {
  }
  return 0;
}
