// Pre-tokenizer regexes of byte-level BPE vocabularies, run with PCRE2 (UTF + UCP so that
// \p{L}, \s, (?i) follow Unicode, as the Oniguruma regexes of HF tokenizers do).
#include <pcre2.h>

#include <stdexcept>
#include <string>

#include "engine/text/tokenizer_internal.hpp"

namespace tandem::tok_detail {

namespace {

// GPT-2 (also HF ByteLevel's built-in regex with use_regex=true).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2 / Qwen2.5: contractions case-insensitive, single digits, newlines kept with
// the punctuation before them.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3: as Qwen2 but numbers in groups of up to three digits.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// SmolLM / StarCoder: HF Digits(individual_digits) first, then the GPT-2 regex.
constexpr const char* kEachDigit = R"(\p{N})";

// The patterns are written with \s and \S as the models' tokenizer.json spell them. HF
// tokenizers runs them with Oniguruma, whose \s is exactly Unicode White_Space; PCRE2's \s
// (with UCP) also matches U+180E MONGOLIAN VOWEL SEPARATOR, which changes splits around it.
// So \s / \S are rewritten to this explicit class before compiling.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r\x20\x85\xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string with_unicode_white_space(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct PreDef {
  const char* name;
  std::vector<const char*> stages;
  bool ignore_merges;
};

const std::vector<PreDef>& pre_defs() {
  static const std::vector<PreDef> defs = {
      {"gpt2", {kGpt2}, false},
      // llama.cpp's converter writes "default" when it did not recognise the tokenizer;
      // for a byte-level vocabulary the GPT-2 regex is HF ByteLevel's default.
      {"default", {kGpt2}, false},
      {"smollm", {kEachDigit, kGpt2}, false},
      {"starcoder", {kEachDigit, kGpt2}, false},
      {"qwen2", {kQwen2}, false},
      {"deepseek-r1-qwen", {kQwen2}, false},
      {"llama-bpe", {kLlama3}, true},
      {"llama3", {kLlama3}, true},
      {"llama-v3", {kLlama3}, true},
  };
  return defs;
}

}  // namespace

bool Pretokenizer::same_rules(std::string_view a, std::string_view b) {
  const PreDef *da = nullptr, *db = nullptr;
  for (const auto& d : pre_defs()) {
    if (a == d.name) da = &d;
    if (b == d.name) db = &d;
  }
  return da && db && da->stages == db->stages && da->ignore_merges == db->ignore_merges;
}

struct Pretokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

Pretokenizer::Pretokenizer(std::string_view pre) {
  const PreDef* def = nullptr;
  for (const auto& d : pre_defs())
    if (pre == d.name) def = &d;
  if (!def) {
    std::string known;
    for (const auto& n : known_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::runtime_error("tokenizer: unsupported pre-tokenizer '" + std::string(pre) +
                             "' (tokenizer.ggml.pre); supported: " + known);
  }
  ignore_merges_ = def->ignore_merges;
  for (const char* pattern : def->stages) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto r = std::make_unique<Regex>();
    const std::string expanded = with_unicode_white_space(pattern);
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.c_str()), expanded.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::runtime_error("tokenizer: bad pre-tokenizer regex: " +
                               std::string(reinterpret_cast<char*>(msg)));
    }
    // JIT is an optimisation only; the interpreter gives the same matches.
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
    stages_.push_back(std::move(r));
  }
}

Pretokenizer::~Pretokenizer() = default;

std::vector<std::string> Pretokenizer::known_names() {
  std::vector<std::string> names;
  for (const auto& d : pre_defs()) names.emplace_back(d.name);
  return names;
}

namespace {

// Appends the pieces of `text` under one regex: every match, and every gap between
// matches, in order. The whole `text` is the subject, so look-aheads stop at its end.
void split_one(const pcre2_code* code, pcre2_match_data* md, std::string_view text,
               std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  uint32_t no_jit = 0;
  while (offset < text.size()) {
    // The caller guarantees well-formed UTF-8: skipping the check keeps this linear
    // (PCRE2 would otherwise re-validate the subject on every call).
    int rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | no_jit, md,
                         nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !no_jit) {
      no_jit = PCRE2_NO_JIT;  // very long runs can exhaust the JIT stack; interpret instead
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error("tokenizer: pre-tokenizer regex failed: " +
                               std::string(reinterpret_cast<char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t start = ov[0], end = ov[1];
    if (end == start) {
      // None of our patterns can match empty, but never loop: let the gap absorb one char.
      size_t next = start + 1;
      while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
      if (start > offset) out.push_back(text.substr(offset, start - offset));
      out.push_back(text.substr(start, next - start));
      offset = next;
      continue;
    }
    if (start > offset) out.push_back(text.substr(offset, start - offset));
    out.push_back(text.substr(start, end - start));
    offset = end;
  }
  if (offset < text.size()) out.push_back(text.substr(offset));
}

}  // namespace

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& stage : stages_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(stage->code, nullptr);
    if (!md) throw std::bad_alloc();
    next.clear();
    try {
      for (std::string_view piece : out) split_one(stage->code, md, piece, next);
    } catch (...) {
      pcre2_match_data_free(md);
      throw;
    }
    pcre2_match_data_free(md);
    out.swap(next);
  }
}

}  // namespace tandem::tok_detail
