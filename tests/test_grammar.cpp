// GBNF grammars: parsing (and its errors), the automaton's language, and token masks over a
// vocabulary, each checked against a plain reference: a token is allowed iff the grammar
// accepts some sentence starting with the text so far plus that token.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/grammar/gbnf_compose.hpp"
#include "engine/grammar/grammar.hpp"
#include "engine/grammar/token_grammar.hpp"

using namespace tandem;

namespace {

std::shared_ptr<const Grammar> G(const std::string& s) { return Grammar::parse(s); }

std::string parse_error(const std::string& s) {
  try {
    Grammar::parse(s);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

// Whether `prefix` can be continued into a sentence: by the automaton's state being alive.
bool viable(const Grammar& g, const std::string& prefix) {
  GrammarState s = g.initial();
  g.advance_in_place(s, prefix);
  return !s.dead();
}

}  // namespace

TEST(Grammar, LiteralsClassesAndRepetition) {
  auto g = G(R"(root ::= "ab" [0-9]+ ("x" | "yz")? "!"{2,3})");
  for (const char* ok : {"ab1!!", "ab123x!!", "ab0yz!!!"}) EXPECT_TRUE(g->accepts(ok)) << ok;
  for (const char* bad : {"ab!!", "ab1y!!", "ab1!", "ab1!!!!", "Ab1!!", "ab1x!!x"}) EXPECT_FALSE(g->accepts(bad)) << bad;
}

TEST(Grammar, RulesRecursionAndNewlines) {
  // Alternatives continue over lines; a rule ends where the next begins.
  auto g = G("root ::= list\nlist ::= \"[\" ( item (\",\" item)* )? \"]\"\n"
             "item ::= [a-z]+\n   | list   # nested lists\n");
  for (const char* ok : {"[]", "[a]", "[a,bc]", "[[a],[],b]", "[[[[]]]]"}) EXPECT_TRUE(g->accepts(ok)) << ok;
  for (const char* bad : {"[", "[a,]", "[,a]", "[[a]", "a", "[]]"}) EXPECT_FALSE(g->accepts(bad)) << bad;
}

TEST(Grammar, NegatedClassesDotAndEscapes) {
  auto g = G(R"(root ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\nt] )* "\"" . "\u00e9" [\t\n])");
  EXPECT_TRUE(g->accepts("\"a b\\\"c\"Zé\t"));
  EXPECT_TRUE(g->accepts("\"\"\xF0\x9F\x98\x80" "é\n"));  // '.' takes one code point, here 4 bytes
  EXPECT_FALSE(g->accepts("\"a\nb\"Zé\t"));                 // a raw control character in the string
  EXPECT_FALSE(g->accepts("\"\\q\"Zé\t"));
  EXPECT_FALSE(g->accepts("\"\"Ze\t"));
}

TEST(Grammar, Utf8ClassesMatchWholeCodePoints) {
  auto g = G("root ::= [α-ω]+");  // U+03B1..U+03C9: two bytes each, CE B1 .. CF 89
  EXPECT_TRUE(g->accepts("αβω"));
  EXPECT_FALSE(g->accepts("αΩ"));  // U+03A9 (CE A9) is below the range
  // Half a character is a viable prefix when some completion is in the class...
  EXPECT_TRUE(viable(*g, "\xCE"));
  EXPECT_TRUE(viable(*g, "\xCF"));
  // ... and not when none is (D0 starts U+0400..U+043F), nor for bytes that are no UTF-8.
  EXPECT_FALSE(viable(*g, "\xD0"));
  EXPECT_FALSE(viable(*g, "\xFF"));
  EXPECT_FALSE(viable(*g, "\x80"));
  EXPECT_FALSE(g->accepts("\xCE"));  // an unfinished character is not a sentence
}

// A lead byte of a longer character is no prefix of a short one: E0 starts U+0800..U+0FFF,
// so it cannot begin ' ' or '"'; overlong spellings and surrogates are not UTF-8.
TEST(Grammar, Utf8LeadBytesOnlyStartTheCodePointsTheyCanSpell) {
  auto ascii = G(R"(root ::= [ "a-z]+)");
  for (const char* bad : {"\xE0", "\xF0", "\xC2", "\xC0\xA0", "\xE0\x80\xA0"}) EXPECT_FALSE(viable(*ascii, bad));
  auto any = G("root ::= .+");
  EXPECT_TRUE(viable(*any, "\xE0\xA0"));            // U+0800..
  EXPECT_FALSE(viable(*any, "\xE0\x80"));           // overlong: below U+0800
  EXPECT_FALSE(viable(*any, "\xED\xA0"));           // U+D800..: surrogates
  EXPECT_TRUE(any->accepts("\xED\x9F\xBF"));       // U+D7FF
  EXPECT_FALSE(viable(*any, "\xF4\x90"));           // beyond U+10FFFF
  EXPECT_TRUE(any->accepts("\xF4\x8F\xBF\xBF"));  // U+10FFFF
}

// Generated rules (groups, repetitions) have no names the text can use: a rule the text
// calls "root-2" is its own.
TEST(Grammar, GeneratedRulesNeverClashWithNamedOnes) {
  auto g = G("root ::= (\"a\")* root-2\nroot-2 ::= \"b\"");
  EXPECT_TRUE(g->accepts("aab"));
  EXPECT_NE(parse_error("root ::= (\"a\" | \"c\") root-1").find("'root-1' is not defined"), std::string::npos);
  auto big = G("root ::= \"x\"{1000,}");
  EXPECT_TRUE(big->accepts(std::string(1000, 'x')));
  EXPECT_FALSE(big->accepts(std::string(999, 'x')));
}

TEST(Grammar, BoundedRepetitionCounts) {
  auto g = G("root ::= \"a\"{3} \"b\"{0,2} \"c\"{2,}");
  EXPECT_TRUE(g->accepts("aaacc"));
  EXPECT_TRUE(g->accepts("aaabbcccc"));
  EXPECT_FALSE(g->accepts("aacc"));
  EXPECT_FALSE(g->accepts("aaabbbcc"));
  EXPECT_FALSE(g->accepts("aaac"));
}

// The counts of "a" a grammar over "a" alone accepts, among 0..n.
std::vector<int> counts_accepted(const std::string& gbnf, int n = 12) {
  auto g = G(gbnf);
  std::vector<int> out;
  for (int k = 0; k <= n; ++k)
    if (g->accepts(std::string(static_cast<size_t>(k), 'a'))) out.push_back(k);
  return out;
}

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int k = lo; k <= hi; ++k) v.push_back(k);
  return v;
}

TEST(Grammar, StackedRepetitionsKeepTheirLanguage) {
  // Stacked operators are merged into one repetition where that is exact; where it is not
  // (an inner minimum above 1, an outer count of 0), they are kept as written.
  EXPECT_EQ(counts_accepted(R"(root ::= "a"++)"), range(1, 12));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"+*)"), range(0, 12));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"?+)"), range(0, 12));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"??)"), range(0, 1));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"{1,3}{1,2})"), range(1, 6));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"?{2,3})"), range(0, 3));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"{2}{0,2})"), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"{2}+)"), (std::vector<int>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"+{0} "a")"), (std::vector<int>{1}));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"{3}{2} "a"{0}?)"), (std::vector<int>{6}));
  EXPECT_EQ(counts_accepted(R"(root ::= "aa"+?)"), (std::vector<int>{0, 2, 4, 6, 8, 10, 12}));
  // An outer count above 1 merges too when the inner minimum is at most 1.
  EXPECT_EQ(counts_accepted(R"(root ::= "a"?{5})"), range(0, 5));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"{1,2}{3})"), range(3, 6));
  EXPECT_EQ(counts_accepted(R"(root ::= "a"+{2,3})"), range(2, 12));
  // A group holding one repetition is that repetition; a group holding more is not.
  EXPECT_EQ(counts_accepted(R"(root ::= ("a"?){4})"), range(0, 4));
  EXPECT_EQ(counts_accepted(R"(root ::= (("a"+)+)?)"), range(0, 12));
  EXPECT_EQ(counts_accepted(R"(root ::= ("a"? "a"){2})"), range(2, 4));
  EXPECT_EQ(counts_accepted(R"(root ::= ("a"{2} | "a"{3})+)"), (std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST(Grammar, DeeplyStackedRepetitionIsMergedOrRefused) {
  // Found by fuzz_grammar (tests/fuzz/corpus/grammar/stacked_plus_timeout.gbnf): `x+++…` took
  // seconds a byte, reaching each place along exponentially many paths. Stacked operators
  // are now one repetition, and a step expands each place once.
  const auto nested = [](int levels) {  // ((("a")+)+)+…: a group at every level, never merged
    std::string g = "root ::= " + std::string(static_cast<size_t>(levels), '(') + R"("a")";
    for (int i = 0; i < levels; ++i) g += ")+";
    return g;
  };
  for (const std::string& gbnf : {R"(root ::= "a")" + std::string(60, '+'), nested(8)}) {
    auto g = G(gbnf);
    EXPECT_TRUE(g->accepts(std::string(200, 'a'))) << gbnf;
    EXPECT_FALSE(g->accepts(std::string(200, 'a') + "b")) << gbnf;
    EXPECT_FALSE(g->accepts("")) << gbnf;
  }
  // Groups holding one repetition merge as well: 40 of them are one `"a"+`. Found by
  // fuzz_grammar too (corpus/grammar/optional_copies_timeout.gbnf): `x?{335}`, 335 optional
  // copies whose parses the automaton kept apart, is x{0,335}.
  for (const std::string& gbnf : {nested(40), std::string(R"(root ::= "a"?{335})"), std::string(R"(root ::= ("a"?){335})")}) {
    auto g = G(gbnf);
    EXPECT_TRUE(g->accepts(std::string(200, 'a'))) << gbnf;
    EXPECT_FALSE(g->accepts(std::string(200, 'a') + "b")) << gbnf;
    GrammarState s = g->initial();
    g->advance_in_place(s, std::string(100, 'a'));
    EXPECT_LE(s.stacks.size(), 2u) << gbnf << ": one parse (and the end), not one per way to get here";
  }
  // Repeated alternatives are one (`"" | "" | "a"` is `"" | "a"`), and a repetition that keeps
  // more than 512 parses alive is refused at once: `("aa" | "a" | ""){4,580}` (found by
  // fuzz_grammar, corpus/grammar/nullable_copies_timeout.gbnf) could be in any of its 580
  // copies after a few characters.
  EXPECT_EQ(counts_accepted(R"(root ::= ("" | "" | "a" | "a") "b"? ("a" | "a"))", 3), (std::vector<int>{1, 2}));
  try {
    G(R"(root ::= ("" | | | "aa" | "a"){4,580} "b")")->accepts("aaaaab");
    ADD_FAILURE() << "580 live parses were not refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
  // What cannot be merged (the same 40 levels, each with a second alternative) and keeps
  // 2^40 parses apart is refused with the documented error, at once.
  std::string alt = "root ::= " + std::string(40, '(') + R"("a")";
  for (int i = 0; i < 40; ++i) alt += R"(+ | "b"))";
  try {
    G(alt)->accepts(std::string(200, 'a'));
    ADD_FAILURE() << "40 nested ambiguous repetitions were not refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

TEST(Grammar, CompleteWhenNothingMayFollow) {
  auto g = G(R"(root ::= "{" "}" " "?)");
  GrammarState s = g->initial();
  g->advance_in_place(s, "{}");
  EXPECT_TRUE(Grammar::accepting(s));
  EXPECT_FALSE(Grammar::complete(s));  // a space may still come
  g->advance_in_place(s, " ");
  EXPECT_TRUE(Grammar::complete(s));
  g->advance_in_place(s, " ");
  EXPECT_TRUE(s.dead());
}

TEST(Grammar, ErrorsNameTheProblemAndWhere) {
  EXPECT_NE(parse_error("root ::= foo").find("'foo' is not defined"), std::string::npos);
  EXPECT_NE(parse_error("rot ::= \"a\"").find("no rule 'root'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a").find("unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\" )").find("1:14: unexpected ')'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("2:1: rule 'root' defined twice"), std::string::npos);
  EXPECT_NE(parse_error("root ::= root \"a\" | \"b\"").find("left recursion"), std::string::npos);
  EXPECT_NE(parse_error("root ::= x \"a\"\nx ::= \"\" | root").find("left recursion"), std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"\")*").find("left recursion"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"{5000}").find("above 1000"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\xff\"").find("invalid UTF-8"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty grammar"), std::string::npos);
  EXPECT_NE(parse_error("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')).find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\" ::= \"b\"").find("unexpected"), std::string::npos);
}

namespace {
// A small byte-level vocabulary: every single byte, some multi-byte pieces, half characters,
// a control token (never allowed) and an end-of-generation token.
TokenVocab toy_vocab() {
  std::vector<std::string> b;
  for (int c = 0; c < 256; ++c) b.push_back(std::string(1, static_cast<char>(c)));
  for (const char* p : {"{\"", "\"}", "\":", "ab", "abc", "\"a", ", \"", "12", "true", "}", "α", "\xCE", "é\"", "  ", "\n"})
    b.push_back(p);
  std::vector<bool> text(b.size(), true);
  b.push_back("<|control|>");
  text.push_back(false);
  b.push_back("<|eos|>");
  text.push_back(false);
  return TokenVocab(b, text, {static_cast<int32_t>(b.size() - 1)});
}
}  // namespace

// Every token's bit against the reference: the grammar has a live parse after the text plus
// the token's bytes (end of generation: the text is a sentence). Checked along random walks
// through the language, i.e. at many different states.
TEST(TokenGrammar, MasksMatchTheReferenceAlongRandomSentences) {
  auto g = G(R"(root ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= "\"" [a-zα-ω]* "\"" ws ":" ws value ws
value ::= "true" | [0-9]+ | "\"" [^"]* "\""
ws ::= [ \n]{0,2})");
  auto vocab = std::make_shared<const TokenVocab>(toy_vocab());
  TokenGrammar tg(g, vocab);
  std::mt19937 rng(7);
  int checked_states = 0;
  for (int walk = 0; walk < 30; ++walk) {
    GrammarState s = tg.initial();
    std::string text;
    for (int step = 0; step < 40; ++step) {
      const auto m = tg.mask(s);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        bool ref;
        if (vocab->is_eog(id)) {
          ref = g->accepts(text);
        } else if (!vocab->is_text(id)) {
          ref = false;
        } else {
          ref = viable(*g, text + vocab->bytes(id));
        }
        ASSERT_EQ(mask_allows(*m, id), ref) << "token " << id << " after '" << text << "'";
        if (ref) allowed.push_back(id);
      }
      ++checked_states;
      ASSERT_FALSE(allowed.empty()) << "dead end after '" << text << "'";
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (vocab->is_eog(t)) break;
      s = tg.after(s, t);
      text += vocab->bytes(t);
      if (TokenGrammar::complete(s)) {
        EXPECT_TRUE(g->accepts(text));
        break;
      }
    }
  }
  EXPECT_GT(checked_states, 100);
  const auto st = tg.stats();
  EXPECT_GT(st.cache_hits, 0);  // the same states recur (inside strings, between pairs)
}

TEST(TokenGrammar, ControlTokensNeverAndEndOfGenerationOnlyAtTheEnd) {
  auto g = G(R"(root ::= "ab" "c"?)");
  auto vocab = std::make_shared<const TokenVocab>(toy_vocab());
  TokenGrammar tg(g, vocab);
  const int32_t control = vocab->size() - 2, eos = vocab->size() - 1;
  GrammarState s = tg.initial();
  EXPECT_FALSE(tg.allows(s, eos));
  EXPECT_FALSE(tg.allows(s, control));
  EXPECT_TRUE(tg.allows(s, 'a'));
  EXPECT_FALSE(tg.allows(s, 'b'));
  s = tg.after(s, 'a');
  s = tg.after(s, 'b');
  EXPECT_TRUE(tg.allows(s, eos));
  EXPECT_TRUE(tg.allows(s, 'c'));
  EXPECT_FALSE(TokenGrammar::complete(s));
  s = tg.after(s, 'c');
  EXPECT_TRUE(TokenGrammar::complete(s));
  EXPECT_TRUE(tg.allows(s, eos));
  EXPECT_FALSE(tg.allows(s, 'c'));
}

// A grammar inside another: its rules renamed, literals, classes, counts and comments kept.
TEST(GbnfCompose, PrefixedRulesNestInsideAnotherGrammar) {
  const std::string inner = "root ::= item (\",\" item){0,2} # items\nitem ::= [a-z_]+ | \"root\"";
  const std::string renamed = gbnf_prefix_rules(inner, "in-");
  EXPECT_EQ(renamed, "in-root ::= in-item (\",\" in-item){0,2} # items\nin-item ::= [a-z_]+ | \"root\"");
  auto g = G(renamed + "\nroot ::= \"<\" in-root \">\"");
  EXPECT_TRUE(g->accepts("<a,root,b_c>"));
  EXPECT_FALSE(g->accepts("<a,b,c,d>"));
  EXPECT_FALSE(g->accepts("a"));
  EXPECT_THROW(gbnf_prefix_rules(inner, "a b"), std::invalid_argument);
}

TEST(GbnfCompose, QuotedLiteralsMatchExactlyTheirText) {
  for (const std::string& t : std::vector<std::string>{"plain", "q\"uote\\", "tab\tnl\n\r", std::string("nul\0x", 5), "\x01\x7f", "é→😀", ""}) {
    auto g = G("root ::= " + gbnf_quote(t) + " \"!\"");
    EXPECT_TRUE(g->accepts(t + "!")) << gbnf_quote(t);
    EXPECT_FALSE(g->accepts(t + "?")) << gbnf_quote(t);
  }
}
