// Tokenizer tests: hand-made vocabularies (no model needed) for the algorithms' rules, and
// golden ids from an independent reference (tests/python/tokenize_ref.py: HF tokenizers for
// byte-level BPE, Google sentencepiece for Gemma) for every model in the cache.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "engine/gguf/gguf.hpp"
#include "engine/text/tokenizer.hpp"
#include "engine/text/tokenizer_internal.hpp"
#include "engine/text/utf8.hpp"
#include "tests/support/paths.hpp"

namespace tandem {
namespace {

// ---- the golden files (JSON lines written by Python's json.dumps), read with Boost.JSON --
// into a small accessor type the tests below use.
struct Json {
  std::string str;
  std::vector<Json> arr;
  // An object's keys and values side by side (a pair holding a Json would need Json complete).
  std::vector<std::string> keys;
  std::vector<Json> values;
  int64_t num = 0;

  const Json& operator[](std::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return values[i];
    throw std::runtime_error("json: no key " + std::string(key));
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const Json& j : arr) out.push_back(static_cast<int32_t>(j.num));
    return out;
  }
  static Json from(const boost::json::value& v) {
    Json j;
    if (v.is_string()) j.str = std::string(v.get_string());
    if (v.is_int64()) j.num = v.get_int64();
    if (v.is_array())
      for (const auto& e : v.get_array()) j.arr.push_back(from(e));
    if (v.is_object())
      for (const auto& [k, e] : v.get_object()) {
        j.keys.emplace_back(k);
        j.values.push_back(from(e));
      }
    return j;
  }
};

std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<Json> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(Json::from(boost::json::parse(line)));
  return out;
}

std::string data_path(const std::string& name) {
  return test::source_dir() + "/tests/data/tokenizer/" + name;
}

// ---- hand-made vocabularies ---------------------------------------------------------------

// GPT-2's byte alphabet, written out from its definition (independent of the engine's).
std::string byte_spelling(int b) {
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  utf8::append(s, static_cast<char32_t>(cp));
  return s;
}

// 256 byte tokens (id == byte), then `extra` tokens; `merges` by rank.
TokenizerData byte_level_data(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                              const std::vector<int32_t>& extra_types = {}) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) d.tokens.push_back(byte_spelling(b));
  d.token_types.assign(256, 1);
  for (size_t i = 0; i < extra.size(); ++i) {
    d.tokens.push_back(extra[i]);
    d.token_types.push_back(i < extra_types.size() ? extra_types[i] : 1);
  }
  d.merges = merges;
  return d;
}

int32_t id_of(const Tokenizer& t, std::string_view text) {
  auto id = t.find_token(text);
  if (!id) throw std::runtime_error("no token " + std::string(text));
  return *id;
}

TEST(Utf8, SanitizeFollowsMaximalSubparts) {
  // Expected values are what Python's bytes.decode("utf-8", "replace") gives.
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8::sanitize("abc"), "abc");
  EXPECT_EQ(utf8::sanitize("\xC0\xAF"), R + R);          // overlong lead, lone continuation
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), R + R + R);  // surrogate
  EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98"), R);          // truncated 4-byte sequence
  EXPECT_EQ(utf8::sanitize("\xE2\x82\x41"), R + "A");    // interrupted sequence
  EXPECT_EQ(utf8::sanitize("\xF4\x90\x80\x80"), R + R + R + R);  // > U+10FFFF
  EXPECT_EQ(utf8::sanitize("\xFF" "a\xFE"), R + "a" + R);
  EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_TRUE(utf8::is_valid("caf\xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xC3"));
}

TEST(TokenizerBpe, MergesApplyByRank) {
  const std::vector<std::string> extra = {"he", "ll", "hell", "hello", byte_spelling(' ') + "w"};
  auto t = Tokenizer::from_data(byte_level_data(extra, {"h e", "l l", "he ll", "hell o", byte_spelling(' ') + " w"}));
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<int32_t>{id_of(*t, "hello")}));
  EXPECT_EQ(t->encode("hello hello", false, false),
            (std::vector<int32_t>{id_of(*t, "hello"), ' ', id_of(*t, "hello")}));
  EXPECT_EQ(t->encode("help", false, false), (std::vector<int32_t>{id_of(*t, "he"), 'l', 'p'}));

  // The same two merges in opposite order give opposite results.
  auto bc_first = Tokenizer::from_data(byte_level_data({"ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(bc_first->encode("abc", false, false), (std::vector<int32_t>{'a', id_of(*bc_first, "bc")}));
  auto ab_first = Tokenizer::from_data(byte_level_data({"ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(ab_first->encode("abc", false, false), (std::vector<int32_t>{id_of(*ab_first, "ab"), 'c'}));

  // Equal ranks: leftmost first.
  auto aa = Tokenizer::from_data(byte_level_data({"aa"}, {"a a"}));
  EXPECT_EQ(aa->encode("aaa", false, false), (std::vector<int32_t>{id_of(*aa, "aa"), 'a'}));
  EXPECT_EQ(aa->encode("aaaa", false, false), (std::vector<int32_t>{id_of(*aa, "aa"), id_of(*aa, "aa")}));
}

TEST(TokenizerBpe, BytesAndDecoding) {
  auto t = Tokenizer::from_data(byte_level_data({}, {"a b"}));  // the merge's result is absent: ignored
  EXPECT_EQ(t->token_to_piece(' '), " ");
  EXPECT_EQ(t->token_to_piece('\n'), "\n");
  EXPECT_EQ(t->token_to_piece(0xC3), "\xC3");
  EXPECT_EQ(t->token_text(' '), "\xC4\xA0");  // "Ġ"
  const std::string s = "x\ty\r\n\xC3\xA9\xF0\x9F\x98\x80 \x7F";
  const auto ids = t->encode(s, false, false);
  EXPECT_EQ(ids.size(), s.size());  // no merges: one token per byte
  EXPECT_EQ(t->decode(ids), s);
  EXPECT_EQ(t->token_to_piece(-1), "");
  EXPECT_EQ(t->token_to_piece(100000), "");
  // Ill-formed input becomes U+FFFD (EF BF BD) before tokenizing.
  EXPECT_EQ(t->encode("a\xFF", false, false), (std::vector<int32_t>{'a', 0xEF, 0xBF, 0xBD}));
}

TEST(TokenizerBpe, SpecialTokens) {
  auto d = byte_level_data({"<|im_start|>", "<|im_end|>", "<tool>", "<|endoftext|>"}, {"a b"}, {3, 3, 4, 3});
  d.bos_id = 256;
  d.eos_id = 257;
  d.add_bos = true;
  auto t = Tokenizer::from_data(d);
  const int32_t start = 256, end = 257, tool = 258, eot = 259;
  EXPECT_EQ(t->encode("<|im_start|>hi<|im_end|>", false, true), (std::vector<int32_t>{start, 'h', 'i', end}));
  // Not parsed: the text is ordinary bytes, so user text cannot inject a turn marker.
  auto plain = t->encode("<|im_start|>hi", false, false);
  EXPECT_EQ(plain.size(), std::string("<|im_start|>hi").size());
  EXPECT_EQ(t->decode(plain), "<|im_start|>hi");
  // User-defined tokens are always matched.
  EXPECT_EQ(t->encode("a<tool>b", false, false), (std::vector<int32_t>{'a', tool, 'b'}));
  // Leftmost-longest, near-misses stay text.
  EXPECT_EQ(t->encode("<|im_start<|im_end|>", false, true).back(), end);
  // BOS from add_special; EOS not added (add_eos defaults to false).
  EXPECT_EQ(t->encode("hi", true, true), (std::vector<int32_t>{start, 'h', 'i'}));
  EXPECT_EQ(t->encode("", true, true), (std::vector<int32_t>{start}));
  EXPECT_EQ(t->encode("", false, true), (std::vector<int32_t>{}));

  EXPECT_EQ(t->decode(std::vector<int32_t>{start, 'h', end}), "<|im_start|>h<|im_end|>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{start, 'h', end, tool}, true), "h<tool>");
  EXPECT_TRUE(t->is_control(start));
  EXPECT_FALSE(t->is_control(tool));
  EXPECT_FALSE(t->is_control('h'));
  EXPECT_EQ(t->bos(), start);
  EXPECT_EQ(t->eos(), end);
  EXPECT_EQ(t->eot(), end);  // <|im_end|> found by text
  EXPECT_TRUE(t->is_eog(end));
  EXPECT_TRUE(t->is_eog(eot));
  EXPECT_FALSE(t->is_eog(start));
  EXPECT_FALSE(t->is_eog('h'));
  EXPECT_EQ(t->n_vocab(), 260);
}

// Fill-in-the-middle markers: named by the metadata, else found by a family's texts (all
// three, special tokens only); none when the set is incomplete or they are ordinary text.
TEST(TokenizerBpe, FimMarkersFromMetadataOrTheirTexts) {
  auto qwen = Tokenizer::from_data(
      byte_level_data({"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"}, {"a b"}, {3, 3, 3, 3}));
  ASSERT_TRUE(qwen->fim());
  EXPECT_EQ(qwen->fim()->prefix, 256);
  EXPECT_EQ(qwen->fim()->suffix, 258);
  EXPECT_EQ(qwen->fim()->middle, 257);
  auto starcoder =
      Tokenizer::from_data(byte_level_data({"<fim_middle>", "<fim_suffix>", "<fim_prefix>"}, {"a b"}, {3, 4, 3}));
  ASSERT_TRUE(starcoder->fim());
  EXPECT_EQ(starcoder->fim()->prefix, 258);
  EXPECT_EQ(starcoder->fim()->suffix, 257);
  EXPECT_EQ(starcoder->fim()->middle, 256);
  auto named_data = byte_level_data({"[P]", "[S]", "[M]", "<|fim_prefix|>"}, {"a b"}, {3, 3, 3, 3});
  named_data.fim_pre_id = 256;
  named_data.fim_suf_id = 257;
  named_data.fim_mid_id = 258;
  auto named = Tokenizer::from_data(named_data);
  ASSERT_TRUE(named->fim());
  EXPECT_EQ(named->fim()->prefix, 256);
  EXPECT_EQ(named->fim()->suffix, 257);
  EXPECT_EQ(named->fim()->middle, 258);
  EXPECT_FALSE(Tokenizer::from_data(byte_level_data({"<|fim_prefix|>", "<|fim_suffix|>"}, {"a b"}, {3, 3}))->fim())
      << "no middle marker";
  EXPECT_FALSE(Tokenizer::from_data(byte_level_data({"<PRE>", "<SUF>", "<MID>"}, {"a b"}, {1, 1, 1}))->fim())
      << "ordinary tokens are text, not markers";
  EXPECT_FALSE(Tokenizer::from_data(byte_level_data({"<|im_end|>"}, {"a b"}, {3}))->fim());
}

TEST(TokenizerBpe, RejectsUnknownConfigurations) {
  auto d = byte_level_data({}, {"a b"});
  d.pre = "no-such-pre";
  try {
    Tokenizer::from_data(d);
    FAIL() << "unknown pre accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();  // lists known ones
  }
  d = byte_level_data({}, {"a b"});
  d.model = "bert";
  EXPECT_THROW(Tokenizer::from_data(d), std::runtime_error);
  d = byte_level_data({}, {});
  EXPECT_THROW(Tokenizer::from_data(d), std::runtime_error);  // gpt2 without merges
  d = byte_level_data({}, {"a b"});
  d.token_types.pop_back();
  EXPECT_THROW(Tokenizer::from_data(d), std::runtime_error);
}

// SentencePiece-style: <unk> <s> </s>, 256 byte tokens, then scored pieces.
TokenizerData spm_data(std::vector<std::pair<std::string, float>> pieces, bool add_space_prefix = false) {
  TokenizerData d;
  d.model = "llama";
  d.pre = "default";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {2, 3, 3};
  d.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    d.tokens.push_back(name);
    d.token_types.push_back(6);
    d.scores.push_back(0);
  }
  for (auto& [p, s] : pieces) {
    d.tokens.push_back(p);
    d.token_types.push_back(1);
    d.scores.push_back(s);
  }
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_space_prefix = add_space_prefix;
  return d;
}

const std::string kSp = "\xE2\x96\x81";  // "▁"

std::vector<std::pair<std::string, float>> hello_pieces() {
  return {{"h", -1}, {"e", -2}, {"l", -3}, {"o", -4}, {kSp, -5}, {"ll", -0.5f}, {"he", -1.0f},
          {"hell", -1.5f}, {"hello", -2.0f}, {kSp + "hello", -3.0f}, {"lo", -0.7f}};
}

TEST(TokenizerSpm, MergesByScore) {
  auto t = Tokenizer::from_data(spm_data(hello_pieces()));
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<int32_t>{id_of(*t, "hello")}));
  EXPECT_EQ(t->encode(" hello", false, false), (std::vector<int32_t>{id_of(*t, kSp + "hello")}));
  // "ll" (-0.5) beats "lo" (-0.7) ...
  EXPECT_EQ(t->encode("llo", false, false), (std::vector<int32_t>{id_of(*t, "ll"), id_of(*t, "o")}));
  // ... and loses when the scores are swapped.
  auto p = hello_pieces();
  for (auto& [s, score] : p)
    if (s == "lo") score = -0.1f;
  auto t2 = Tokenizer::from_data(spm_data(p));
  EXPECT_EQ(t2->encode("llo", false, false), (std::vector<int32_t>{id_of(*t2, "l"), id_of(*t2, "lo")}));
  EXPECT_EQ(t->decode(t->encode("hello hello", false, false)), "hello hello");
  // BOS added by default for SentencePiece vocabularies.
  EXPECT_EQ(t->encode("hello", true, false), (std::vector<int32_t>{1, id_of(*t, "hello")}));
}

TEST(TokenizerSpm, ByteFallback) {
  auto t = Tokenizer::from_data(spm_data(hello_pieces()));
  const auto ids = t->encode("h\xC3\xA9", false, false);  // "hé": é has no piece
  EXPECT_EQ(ids, (std::vector<int32_t>{id_of(*t, "h"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->token_to_piece(3 + 0xC3), "\xC3");
  EXPECT_EQ(t->decode(ids), "h\xC3\xA9");
  const std::string emoji = "\xF0\x9F\x98\x80";
  EXPECT_EQ(t->decode(t->encode("he" + emoji + " hello", false, false)), "he" + emoji + " hello");
}

TEST(TokenizerSpm, DummyPrefixAndUserDefined) {
  auto t = Tokenizer::from_data(spm_data(hello_pieces(), /*add_space_prefix=*/true));
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<int32_t>{id_of(*t, kSp + "hello")}));
  EXPECT_EQ(t->decode(t->encode("hello", false, false)), "hello");
  EXPECT_EQ(t->decode(t->encode(" hello", false, false)), " hello");

  // User-defined pieces stored with real spaces (as llama.cpp converts Gemma) or with "▁".
  auto d = spm_data(hello_pieces());
  d.tokens.push_back("  ");
  d.token_types.push_back(4);
  d.scores.push_back(-1000);
  d.tokens.push_back(kSp + kSp + kSp);
  d.token_types.push_back(4);
  d.scores.push_back(-1000);
  auto u = Tokenizer::from_data(d);
  const int32_t two = u->n_vocab() - 2, three = u->n_vocab() - 1;
  EXPECT_EQ(u->encode("h  o", false, false), (std::vector<int32_t>{id_of(*u, "h"), two, id_of(*u, "o")}));
  EXPECT_EQ(u->encode("h   o", false, false), (std::vector<int32_t>{id_of(*u, "h"), three, id_of(*u, "o")}));
  EXPECT_EQ(u->decode(std::vector<int32_t>{two, three}), "     ");
}

TEST(TokenizerSpm, UnusedPiecesAreSplitBack) {
  auto d = spm_data(hello_pieces());
  d.tokens.push_back("oo");
  d.token_types.push_back(5);  // unused: may form while merging, never emitted
  d.scores.push_back(10);
  auto t = Tokenizer::from_data(d);
  EXPECT_EQ(t->encode("oo", false, false), (std::vector<int32_t>{id_of(*t, "o"), id_of(*t, "o")}));
}

TEST(StreamDecoder, HoldsIncompleteCharacters) {
  auto t = Tokenizer::from_data(spm_data(hello_pieces()));
  auto byte = [](int b) { return 3 + b; };
  StreamDecoder sd(*t);
  EXPECT_EQ(sd.push(id_of(*t, "hello")), "hello");
  EXPECT_EQ(sd.push(byte(0xF0)), "");
  EXPECT_EQ(sd.push(byte(0x9F)), "");
  EXPECT_EQ(sd.push(1), "");  // <s>: a control token, hidden, does not disturb the pending bytes
  EXPECT_EQ(sd.push(byte(0x98)), "");
  EXPECT_EQ(sd.push(byte(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sd.flush(), "");

  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(sd.push(byte(0xFF)), R);  // can never start a character
  EXPECT_EQ(sd.push(byte(0xE2)), "");
  EXPECT_EQ(sd.push(byte(0x82)), "");
  EXPECT_EQ(sd.push(id_of(*t, "h")), R + "h");  // interrupted: one U+FFFD, then the text
  EXPECT_EQ(sd.push(byte(0xF0)), "");
  EXPECT_EQ(sd.flush(), R);  // cut off at the end
  EXPECT_EQ(sd.flush(), "");

  StreamDecoder shown(*t, /*skip_special=*/false);
  EXPECT_EQ(shown.push(1), "<s>");

  // Dummy-prefix vocabularies: the first space is not output.
  auto p = Tokenizer::from_data(spm_data(hello_pieces(), true));
  StreamDecoder ps(*p);
  std::string out;
  for (int32_t id : p->encode("hello hello", false, false)) out += ps.push(id);
  EXPECT_EQ(out + ps.flush(), "hello hello");
}

TEST(StreamDecoder, ByteLevelEmojiSplitAcrossTokens) {
  auto t = Tokenizer::from_data(byte_level_data({}, {"a b"}));
  const std::string s = "a\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB!";  // 👩‍💻 (ZWJ sequence)
  StreamDecoder sd(*t);
  std::string out;
  std::vector<std::string> steps;
  for (int32_t id : t->encode(s, false, false)) {
    steps.push_back(sd.push(id));
    out += steps.back();
  }
  out += sd.flush();
  EXPECT_EQ(out, s);
  EXPECT_EQ(steps[1], "");  // first byte of 👩 held back
  EXPECT_EQ(steps[4], "\xF0\x9F\x91\xA9");
}

TEST(TokenizerBpe, LongRunsStayFast) {
  // A 1 MB run is one pre-token for some regexes: neither PCRE2's JIT stack nor the merge
  // loop may blow up or go quadratic on it.
  auto t = Tokenizer::from_data(byte_level_data({"  ", "aa"}, {byte_spelling(' ') + " " + byte_spelling(' '), "a a"}));
  for (const std::string unit : {" ", "a", "\n", " \t", "1", "!"}) {
    std::string s;
    while (s.size() < (1u << 20)) s += unit;
    s += "x";
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = t->encode(s, false, false);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(t->decode(ids) == s) << "unit '" << unit << "'";
    EXPECT_LT(secs, 20.0) << "unit '" << unit << "'";
  }
  for (const char* pre : {"gpt2", "smollm", "qwen2", "llama-bpe"}) {
    tok_detail::Pretokenizer p(pre);
    std::vector<std::string_view> pieces;
    const std::string s = std::string(1 << 20, ' ') + "x" + std::string(1 << 20, '\n') + std::string(1 << 18, '7');
    p.split(s, pieces);
    size_t total = 0;
    for (auto piece : pieces) total += piece.size();
    EXPECT_EQ(total, s.size()) << pre;
  }
}

// ---- pre-tokenizer regexes against HF tokenizers (Oniguruma) -----------------------------

TEST(Pretokenizer, MatchesReferenceSplits) {
  const auto golden = read_jsonl(data_path("golden_pretok.jsonl"));
  ASSERT_FALSE(golden.empty()) << "missing tests/data/tokenizer/golden_pretok.jsonl";
  std::map<std::string, std::unique_ptr<tok_detail::Pretokenizer>> pre;
  int checked = 0, failed = 0;
  std::vector<std::string_view> pieces;
  for (const Json& g : golden) {
    const std::string& name = g["pre"].str;
    if (!pre.count(name)) pre[name] = std::make_unique<tok_detail::Pretokenizer>(name);
    const std::string& text = g["text"].str;
    pre[name]->split(text, pieces);
    std::vector<std::string> want, got(pieces.begin(), pieces.end());
    for (const Json& p : g["pieces"].arr) want.push_back(p.str);
    ++checked;
    if (got != want && ++failed <= 10) {
      std::string w, h;
      for (auto& x : want) w += "[" + x + "]";
      for (auto& x : got) h += "[" + x + "]";
      ADD_FAILURE() << name << " on \"" << text << "\"\n  want " << w << "\n  got  " << h;
    }
  }
  EXPECT_EQ(failed, 0) << "of " << checked;
}

// ---- golden ids for real models ------------------------------------------------------------

struct ModelCase {
  const char* key;     // in scripts/models.json
  const char* golden;  // in tests/data/tokenizer
};

// What decode(encode(text)) gives back: the text itself, except that SentencePiece cannot
// tell a "▁" in the input from an escaped space (sentencepiece itself decodes it to ' ').
std::string round_trip_text(const Tokenizer& t, const std::string& text) {
  return t.model() == "llama" ? tok_detail::spm_unescape(text) : text;
}

class TokenizerGolden : public ::testing::TestWithParam<ModelCase> {
 protected:
  static std::unique_ptr<Tokenizer> load(const std::string& path) {
    auto f = gguf::File::open(path);
    return Tokenizer::from_gguf(*f);
  }
};

TEST_P(TokenizerGolden, EncodeMatchesReference) {
  TANDEM_REQUIRE_MODEL(path, GetParam().key);
  auto t = load(path);
  const auto golden = read_jsonl(data_path(GetParam().golden));
  ASSERT_GT(golden.size(), 100u) << "golden file missing or short: " << GetParam().golden;
  int failed = 0;
  for (const Json& g : golden) {
    const std::string& text = g["text"].str;
    for (const bool parse : {true, false}) {
      const auto want = g[parse ? "ids" : "ids_plain"].ids();
      const auto got = t->encode(text, false, parse);
      if (got != want && ++failed <= 10) {
        std::ostringstream msg;
        msg << "parse_special=" << parse << " text=\"" << text << "\"\n  want";
        for (auto id : want) msg << ' ' << id << '(' << t->token_text(id) << ')';
        msg << "\n  got ";
        for (auto id : got) msg << ' ' << id << '(' << t->token_text(id) << ')';
        ADD_FAILURE() << msg.str();
      }
      // Round trip, whole and streamed.
      const std::string back = round_trip_text(*t, text);
      EXPECT_EQ(t->decode(got), back);
      StreamDecoder sd(*t, /*skip_special=*/false);
      std::string streamed;
      for (int32_t id : got) streamed += sd.push(id);
      EXPECT_EQ(streamed + sd.flush(), back);
    }
  }
  EXPECT_EQ(failed, 0) << "of " << 2 * golden.size() << " encodings";
  std::printf("[tokenizer] %s: %zu strings x2 checked, %d mismatches\n", GetParam().key, golden.size(), failed);
}

TEST_P(TokenizerGolden, SpecialTokensAndMetadata) {
  TANDEM_REQUIRE_MODEL(path, GetParam().key);
  auto t = load(path);
  const auto plain = t->encode("Hello", false, true);
  auto with = plain;
  if (t->add_bos() && t->bos() >= 0) with.insert(with.begin(), t->bos());
  if (t->add_eos() && t->eos() >= 0) with.push_back(t->eos());
  EXPECT_EQ(t->encode("Hello", true, true), with);
  EXPECT_GE(t->eos(), 0);
  EXPECT_TRUE(t->is_eog(t->eos()));
  EXPECT_GE(t->eot(), 0);
  EXPECT_TRUE(t->is_eog(t->eot()));
  for (const char* eog : {"<|im_end|>", "<end_of_turn>", "<|endoftext|>"}) {
    if (auto id = t->find_token(eog)) {
      EXPECT_TRUE(t->is_eog(*id)) << eog;
    }
  }
  EXPECT_FALSE(t->is_eog(plain.at(0)));
  // The code models have fill-in-the-middle markers; the others none.
  if (std::string_view(GetParam().key).starts_with("qwen")) {
    ASSERT_TRUE(t->fim());
    EXPECT_EQ(t->token_text(t->fim()->prefix), "<|fim_prefix|>");
    EXPECT_EQ(t->token_text(t->fim()->suffix), "<|fim_suffix|>");
    EXPECT_EQ(t->token_text(t->fim()->middle), "<|fim_middle|>");
  } else {
    EXPECT_FALSE(t->fim()) << t->token_text(t->fim()->prefix);
  }
}

TEST_P(TokenizerGolden, EncodeSpeed) {
  TANDEM_REQUIRE_MODEL(path, GetParam().key);
  auto t = load(path);
  // ~1 MB of the golden strings (prose, code, many scripts) back to back.
  std::string text;
  const auto golden = read_jsonl(data_path(GetParam().golden));
  while (text.size() < (1u << 20))
    for (const Json& g : golden) text += g["text"].str + "\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t->encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mbps = static_cast<double>(text.size()) / 1e6 / s;
  std::printf("[tokenizer] %s: encoded %.2f MB into %zu tokens in %.3f s = %.2f MB/s\n", GetParam().key,
              static_cast<double>(text.size()) / 1e6, ids.size(), s, mbps);
  RecordProperty("encode_MBps", std::to_string(mbps));
  // Not EXPECT_EQ: gtest's diff of two 1 MB strings needs gigabytes.
  EXPECT_TRUE(t->decode(ids) == round_trip_text(*t, text));
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerGolden,
                         ::testing::Values(ModelCase{"smollm2", "golden_smollm2.jsonl"},
                                           ModelCase{"qwen0.5b", "golden_qwen0.5b.jsonl"},
                                           ModelCase{"qwen1.5b", "golden_qwen1.5b.jsonl"},
                                           ModelCase{"gemma3", "golden_gemma3.jsonl"}),
                         [](const auto& info) {
                           std::string n = info.param.golden;
                           n = n.substr(7, n.size() - 13);  // golden_X.jsonl -> X
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace tandem
