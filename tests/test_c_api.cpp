// The C API (include/tandem/tandem.h): every function refuses NULL/invalid handles and bad
// arguments with a status and a message instead of crashing; load errors are clear;
// generation, streaming, cancellation (from the callback and from another thread),
// concurrency, tokenizer round trips, struct_size compatibility, and speculative decoding
// (n-gram and draft model) giving the plain greedy tokens — on a tiny fixture model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "engine/grammar/grammar.hpp"
#include "tandem/engine.hpp"
#include "tandem/tandem.h"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace {

const std::string& dir() {
  static const std::string d = tandem::test::scratch_dir("c-api-" + std::to_string(::getpid()));
  return d;
}

const std::string& model_path() {
  static const std::string p = [] {
    const std::string path = dir() + "/tiny.gguf";
    tandem::test::write_tiny_model(path, tandem::test::TinyModelSpec{});
    return path;
  }();
  return p;
}

// Expects exactly `status` and a non-empty tandem_last_error().
#define EXPECT_FAILS(call, status)                                  \
  do {                                                              \
    EXPECT_EQ((call), (status)) << #call;                           \
    EXPECT_STRNE(tandem_last_error(), "") << #call;                 \
  } while (0)

struct EngineDeleter {
  void operator()(tandem_engine* e) const { tandem_engine_free(e); }
};
using EnginePtr = std::unique_ptr<tandem_engine, EngineDeleter>;
struct ResultDeleter {
  void operator()(tandem_result* r) const { tandem_result_free(r); }
};
using ResultPtr = std::unique_ptr<tandem_result, ResultDeleter>;

EnginePtr load(const std::string& path, const char* draft = nullptr) {
  tandem_load_params lp;
  EXPECT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  lp.model_path = path.c_str();
  lp.draft_model_path = draft;
  lp.threads = 1;
  lp.context = 256;
  tandem_engine* e = nullptr;
  const tandem_status st = tandem_engine_load(&lp, &e);
  EXPECT_EQ(st, TANDEM_OK) << tandem_last_error();
  return EnginePtr(e);
}

tandem_model_info info_of(const tandem_engine* e) {
  tandem_model_info info;
  info.struct_size = sizeof info;
  EXPECT_EQ(tandem_engine_info(e, &info), TANDEM_OK) << tandem_last_error();
  return info;
}

tandem_generate_params greedy(int32_t n) {
  tandem_generate_params gp;
  EXPECT_EQ(tandem_generate_params_init(&gp, sizeof gp), TANDEM_OK);
  gp.max_tokens = n;
  gp.temperature = 0.0f;
  gp.ignore_eos = 1;
  return gp;
}

std::vector<int32_t> tokens_of(const tandem_result* r) { return {r->tokens, r->tokens + r->n_tokens}; }

// A prompt of ids that repeats itself, so n-gram lookup finds continuations.
std::vector<int32_t> repetitive_prompt() {
  std::vector<int32_t> p;
  for (int rep = 0; rep < 3; ++rep)
    for (int32_t t : {17, 42, 99, 150, 7, 230, 64, 5}) p.push_back(t);
  return p;
}

TEST(CApi, VersionAndNames) {
  EXPECT_STREQ(tandem_version(), TANDEM_VERSION_STRING);
  EXPECT_STREQ(tandem_version(), tandem::version_string());
  for (tandem_status s : {TANDEM_OK, TANDEM_CANCELLED, TANDEM_ERR_INVALID_ARGUMENT, TANDEM_ERR_LOAD,
                          TANDEM_ERR_BUFFER_TOO_SMALL, TANDEM_ERR_OUT_OF_MEMORY, TANDEM_ERR_RUNTIME,
                          TANDEM_ERR_INTERNAL})
    EXPECT_STRNE(tandem_status_string(s), "unknown status") << s;
  EXPECT_STREQ(tandem_status_string(static_cast<tandem_status>(1234)), "unknown status");
  EXPECT_STREQ(tandem_finish_reason_string(TANDEM_FINISH_STOP), "stop");
  EXPECT_STREQ(tandem_finish_reason_string(TANDEM_FINISH_LENGTH), "length");
  EXPECT_STREQ(tandem_finish_reason_string(TANDEM_FINISH_CANCELLED), "cancelled");
  EXPECT_STREQ(tandem_finish_reason_string(-5), "unknown");
}

TEST(CApi, ParamsDefaultsMirrorTheCppApi) {
  tandem_generate_params gp;
  ASSERT_EQ(tandem_generate_params_init(&gp, sizeof gp), TANDEM_OK);
  EXPECT_STREQ(tandem_last_error(), "");
  const tandem::GenerateOptions d;
  EXPECT_EQ(gp.struct_size, sizeof gp);
  EXPECT_EQ(gp.max_tokens, d.max_tokens);
  EXPECT_EQ(gp.temperature, d.sampling.temperature);
  EXPECT_EQ(gp.top_k, d.sampling.top_k);
  EXPECT_EQ(gp.top_p, d.sampling.top_p);
  EXPECT_EQ(gp.min_p, d.sampling.min_p);
  EXPECT_EQ(gp.repetition_penalty, d.sampling.repetition_penalty);
  EXPECT_EQ(gp.repetition_window, d.sampling.repetition_window);
  // No seed by default: a fresh one per call.
  EXPECT_FALSE(d.sampling.seed.has_value());
  EXPECT_EQ(gp.seed, TANDEM_SEED_RANDOM);
  EXPECT_EQ(gp.stop, nullptr);
  EXPECT_EQ(gp.n_stop, 0u);
  EXPECT_EQ(gp.add_special, 1);
  EXPECT_EQ(gp.parse_special, 1);
  EXPECT_EQ(gp.ignore_eos, 0);
  EXPECT_EQ(gp.draft_mode, TANDEM_DRAFT_NONE);
  EXPECT_EQ(gp.draft_max, d.speculative.draft_max);
  EXPECT_EQ(gp.tree_width, d.speculative.tree_width);
  EXPECT_EQ(gp.tree_nodes, d.speculative.tree_nodes);
  EXPECT_EQ(gp.ngram_min, d.speculative.ngram_min);
  EXPECT_EQ(gp.ngram_max, d.speculative.ngram_max);
  EXPECT_EQ(gp.logprobs, -1);
  EXPECT_EQ(gp.logprobs, d.logprobs);
  EXPECT_EQ(gp.prompt_logprobs, -1);

  tandem_load_params lp;
  ASSERT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  EXPECT_EQ(lp.model_path, nullptr);
  EXPECT_EQ(lp.draft_model_path, nullptr);
  EXPECT_EQ(lp.threads, 0);
  EXPECT_EQ(lp.context, 0);
}

// A program built against an older, shorter struct: init writes only its bytes, and the
// library uses defaults for what lies beyond, whatever is in that memory.
TEST(CApi, ShorterStructsFromOlderHeadersWork) {
  tandem_generate_params gp;
  std::memset(&gp, 0xAB, sizeof gp);
  const size_t old_size = offsetof(tandem_generate_params, draft_mode);
  ASSERT_EQ(tandem_generate_params_init(&gp, old_size), TANDEM_OK);
  EXPECT_EQ(gp.struct_size, old_size);
  EXPECT_EQ(gp.max_tokens, 128);
  unsigned char tail[sizeof gp - offsetof(tandem_generate_params, draft_mode)];
  std::memcpy(tail, reinterpret_cast<const unsigned char*>(&gp) + old_size, sizeof tail);
  for (unsigned char c : tail) ASSERT_EQ(c, 0xAB) << "init wrote past struct_size";
  gp.max_tokens = 3;
  gp.temperature = 0.0f;
  gp.ignore_eos = 1;
  // draft_mode is 0xABABABAB: invalid, but beyond struct_size, so never read.
  auto e = load(model_path());
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r), TANDEM_OK) << tandem_last_error();
  ResultPtr res(r);
  EXPECT_EQ(res->n_tokens, 3u);
  EXPECT_EQ(res->spec_drafts, 0);

  tandem_model_info info;
  std::memset(&info, 0xCD, sizeof info);
  info.struct_size = offsetof(tandem_model_info, n_vocab);
  ASSERT_EQ(tandem_engine_info(e.get(), &info), TANDEM_OK);
  EXPECT_STREQ(info.architecture, "llama");
  EXPECT_EQ(static_cast<uint32_t>(info.n_vocab), 0xCDCDCDCDu) << "info wrote past struct_size";
}

TEST(CApi, NullAndBadArgumentsFailWithAMessage) {
  constexpr tandem_status kInvalid = TANDEM_ERR_INVALID_ARGUMENT;
  EXPECT_FAILS(tandem_load_params_init(nullptr, sizeof(tandem_load_params)), kInvalid);
  tandem_load_params lp;
  EXPECT_FAILS(tandem_load_params_init(&lp, 0), kInvalid);
  EXPECT_FAILS(tandem_generate_params_init(nullptr, sizeof(tandem_generate_params)), kInvalid);
  tandem_generate_params gp;
  EXPECT_FAILS(tandem_generate_params_init(&gp, 3), kInvalid);

  // load
  tandem_engine* e = reinterpret_cast<tandem_engine*>(0x1);  // must be reset to NULL on failure
  EXPECT_FAILS(tandem_engine_load(nullptr, &e), kInvalid);
  EXPECT_EQ(e, nullptr);
  ASSERT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  EXPECT_FAILS(tandem_engine_load(&lp, &e), kInvalid);  // no model_path
  EXPECT_NE(std::string(tandem_last_error()).find("model_path"), std::string::npos) << tandem_last_error();
  lp.model_path = model_path().c_str();
  EXPECT_FAILS(tandem_engine_load(&lp, nullptr), kInvalid);
  lp.threads = -1;
  EXPECT_FAILS(tandem_engine_load(&lp, &e), kInvalid);
  lp.threads = 1;
  lp.kv_type = "f8";
  EXPECT_FAILS(tandem_engine_load(&lp, &e), kInvalid);
  lp.kv_type = nullptr;
  tandem_load_params unset{};  // struct_size 0: never initialised
  unset.model_path = model_path().c_str();
  EXPECT_FAILS(tandem_engine_load(&unset, &e), kInvalid);
  EXPECT_EQ(e, nullptr);

  // NULL engine everywhere
  tandem_model_info info{};
  info.struct_size = sizeof info;
  EXPECT_FAILS(tandem_engine_info(nullptr, &info), kInvalid);
  EXPECT_FAILS(tandem_engine_cancel(nullptr), kInvalid);
  tandem_result* r = reinterpret_cast<tandem_result*>(0x1);
  EXPECT_FAILS(tandem_generate(nullptr, "Hi", nullptr, nullptr, nullptr, &r), kInvalid);
  EXPECT_EQ(r, nullptr);
  const int32_t ids[] = {1, 2, 3};
  EXPECT_FAILS(tandem_generate_tokens(nullptr, ids, 3, nullptr, nullptr, nullptr, &r), kInvalid);
  int32_t buf[8];
  size_t n = 0;
  EXPECT_FAILS(tandem_tokenize(nullptr, "Hi", 0, 0, buf, 8, &n), kInvalid);
  char text[16];
  EXPECT_FAILS(tandem_detokenize(nullptr, ids, 3, text, sizeof text, &n), kInvalid);
  tandem_engine_free(nullptr);
  tandem_result_free(nullptr);

  // A pointer that is not an engine.
  alignas(16) unsigned char junk[256] = {};
  auto* fake = reinterpret_cast<tandem_engine*>(junk);
  EXPECT_FAILS(tandem_engine_info(fake, &info), kInvalid);
  EXPECT_FAILS(tandem_engine_cancel(fake), kInvalid);
  EXPECT_FAILS(tandem_generate(fake, "Hi", nullptr, nullptr, nullptr, &r), kInvalid);
  EXPECT_FAILS(tandem_tokenize(fake, "Hi", 0, 0, buf, 8, &n), kInvalid);
  tandem_engine_free(fake);  // ignored

  // A real engine with bad arguments.
  auto eng = load(model_path());
  ASSERT_TRUE(eng);
  tandem_engine* ep = eng.get();
  EXPECT_FAILS(tandem_engine_info(ep, nullptr), kInvalid);
  tandem_model_info unsized{};
  EXPECT_FAILS(tandem_engine_info(ep, &unsized), kInvalid);
  EXPECT_FAILS(tandem_generate(ep, nullptr, nullptr, nullptr, nullptr, &r), kInvalid);
  EXPECT_FAILS(tandem_generate_tokens(ep, nullptr, 3, nullptr, nullptr, nullptr, &r), kInvalid);
  EXPECT_FAILS(tandem_generate_tokens(ep, ids, 0, nullptr, nullptr, nullptr, &r), kInvalid);  // empty prompt
  const int32_t bad_ids[] = {1, 320, 2};
  EXPECT_FAILS(tandem_generate_tokens(ep, bad_ids, 3, nullptr, nullptr, nullptr, &r), kInvalid);
  EXPECT_NE(std::string(tandem_last_error()).find("320"), std::string::npos) << tandem_last_error();
  const int32_t negative[] = {-1};
  EXPECT_FAILS(tandem_generate_tokens(ep, negative, 1, nullptr, nullptr, nullptr, &r), kInvalid);

  gp = greedy(4);
  gp.draft_mode = 7;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.draft_mode = TANDEM_DRAFT_MODEL;  // no draft model loaded
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.draft_max = -2;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.draft_mode = TANDEM_DRAFT_NGRAM;
  gp.ngram_min = 3;
  gp.ngram_max = 1;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.n_stop = 2;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  const char* stops[] = {"x", nullptr};
  gp.stop = stops;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.temperature = 0.7f;
  gp.repetition_penalty = 0.0f;  // must be > 0
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  gp = greedy(4);
  gp.struct_size = 0;
  EXPECT_FAILS(tandem_generate(ep, "Hi", &gp, nullptr, nullptr, &r), kInvalid);
  EXPECT_EQ(r, nullptr);

  EXPECT_FAILS(tandem_tokenize(ep, nullptr, 0, 0, buf, 8, &n), kInvalid);
  EXPECT_FAILS(tandem_tokenize(ep, "Hi", 0, 0, buf, 8, nullptr), kInvalid);
  EXPECT_FAILS(tandem_tokenize(ep, "Hi", 0, 0, nullptr, 8, &n), kInvalid);
  EXPECT_FAILS(tandem_detokenize(ep, nullptr, 2, text, sizeof text, &n), kInvalid);
  EXPECT_FAILS(tandem_detokenize(ep, ids, 3, text, sizeof text, nullptr), kInvalid);
  EXPECT_FAILS(tandem_detokenize(ep, ids, 3, nullptr, 4, &n), kInvalid);
  EXPECT_FAILS(tandem_detokenize(ep, bad_ids, 3, text, sizeof text, &n), kInvalid);

  // A success clears the message.
  ASSERT_EQ(tandem_tokenize(ep, "Hi", 0, 0, buf, 8, &n), TANDEM_OK);
  EXPECT_STREQ(tandem_last_error(), "");
}

TEST(CApi, LoadErrorsAreClear) {
  tandem_load_params lp;
  ASSERT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  const std::string missing = dir() + "/no-such-model.gguf";
  lp.model_path = missing.c_str();
  tandem_engine* e = nullptr;
  EXPECT_FAILS(tandem_engine_load(&lp, &e), TANDEM_ERR_LOAD);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(tandem_last_error()).find(missing), std::string::npos) << tandem_last_error();

  const std::string junk = dir() + "/junk.gguf";
  std::ofstream(junk) << "this is not a GGUF file, not even close";
  lp.model_path = junk.c_str();
  EXPECT_FAILS(tandem_engine_load(&lp, &e), TANDEM_ERR_LOAD);
  EXPECT_NE(std::string(tandem_last_error()).find("junk.gguf"), std::string::npos) << tandem_last_error();

  lp.model_path = model_path().c_str();
  lp.draft_model_path = missing.c_str();
  EXPECT_FAILS(tandem_engine_load(&lp, &e), TANDEM_ERR_LOAD);
  lp.draft_model_path = nullptr;
  lp.device = "tpu";
  EXPECT_FAILS(tandem_engine_load(&lp, &e), TANDEM_ERR_LOAD);
  EXPECT_NE(std::string(tandem_last_error()).find("tpu"), std::string::npos) << tandem_last_error();
  EXPECT_EQ(e, nullptr);
}

TEST(CApi, InfoDescribesTheModel) {
  auto e = load(model_path());
  tandem_model_info info;
  info.struct_size = sizeof info;
  ASSERT_EQ(tandem_engine_info(e.get(), &info), TANDEM_OK);
  const tandem::test::TinyModelSpec spec;
  EXPECT_EQ(info.struct_size, sizeof info);
  EXPECT_EQ(std::string(info.path), model_path());
  EXPECT_STREQ(info.architecture, "llama");
  EXPECT_EQ(info.n_vocab, spec.n_vocab);
  EXPECT_EQ(info.n_layer, spec.n_layer);
  EXPECT_EQ(info.n_embd, spec.n_embd);
  EXPECT_EQ(info.n_head, spec.n_head);
  EXPECT_EQ(info.n_head_kv, spec.n_head_kv);
  EXPECT_EQ(info.context, 256);
  EXPECT_GT(info.weight_bytes, 0u);
  EXPECT_GT(info.kv_bytes, 0u);
  EXPECT_NE(std::string(info.backend).find("cpu"), std::string::npos) << info.backend;
  EXPECT_STREQ(info.draft_path, "");
}

TEST(CApi, PinnedThreadsAreReported) {
  tandem_load_params lp;
  ASSERT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  EXPECT_EQ(lp.pin_threads, 0);
  const std::string path = model_path();
  lp.model_path = path.c_str();
  lp.threads = 2;
  lp.context = 256;
  lp.pin_threads = 1;
  tandem_engine* raw = nullptr;
  ASSERT_EQ(tandem_engine_load(&lp, &raw), TANDEM_OK) << tandem_last_error();
  EnginePtr e(raw);
  const tandem_model_info info = info_of(e.get());
  EXPECT_NE(std::string(info.backend).find("pinned"), std::string::npos) << info.backend;
}

TEST(CApi, TokenizeDetokenizeRoundTripAndBufferSizes) {
  auto e = load(model_path());
  const char* text = "Hello world, hello tandem!";
  size_t n = 0;
  EXPECT_FAILS(tandem_tokenize(e.get(), text, 0, 0, nullptr, 0, &n), TANDEM_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 0u);
  std::vector<int32_t> ids(n);
  size_t n2 = 0;
  EXPECT_FAILS(tandem_tokenize(e.get(), text, 0, 0, ids.data(), n - 1, &n2), TANDEM_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n2, n);
  ASSERT_EQ(tandem_tokenize(e.get(), text, 0, 0, ids.data(), ids.size(), &n2), TANDEM_OK) << tandem_last_error();
  EXPECT_EQ(n2, n);
  tandem::LoadOptions lo;
  lo.model_path = model_path();
  lo.threads = 1;
  EXPECT_EQ(ids, tandem::Engine::load(lo)->tokenize(text, false, false));

  size_t len = 0;
  EXPECT_FAILS(tandem_detokenize(e.get(), ids.data(), ids.size(), nullptr, 0, &len), TANDEM_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, std::strlen(text));
  std::vector<char> out(len);  // no room for the NUL
  EXPECT_FAILS(tandem_detokenize(e.get(), ids.data(), ids.size(), out.data(), out.size(), &len),
               TANDEM_ERR_BUFFER_TOO_SMALL);
  out.resize(len + 1);
  ASSERT_EQ(tandem_detokenize(e.get(), ids.data(), ids.size(), out.data(), out.size(), &len), TANDEM_OK);
  EXPECT_STREQ(out.data(), text);
  ASSERT_EQ(tandem_detokenize(e.get(), nullptr, 0, out.data(), out.size(), &len), TANDEM_OK);
  EXPECT_EQ(len, 0u);
  EXPECT_STREQ(out.data(), "");
}

struct Stream {
  std::string text;
  std::vector<int32_t> tokens;
  int cancel_after = -1;  // return non-zero on this call (1-based)
  int calls = 0;
  int calls_after_cancel = 0;
  bool cancelled = false;
};

int collect(const char* text, size_t len, int32_t token, void* user_data) {
  auto* s = static_cast<Stream*>(user_data);
  if (s->cancelled) ++s->calls_after_cancel;
  ++s->calls;
  EXPECT_EQ(text[len], '\0');
  s->text.append(text, len);
  s->tokens.push_back(token);
  if (s->calls == s->cancel_after) {
    s->cancelled = true;
    return 1;
  }
  return 0;
}

TEST(CApi, GenerateStreamsTheResultAndMatchesTheCppApi) {
  auto e = load(model_path());
  tandem_generate_params gp = greedy(24);
  Stream s;
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate(e.get(), "Hello world", &gp, collect, &s, &r), TANDEM_OK) << tandem_last_error();
  ResultPtr res(r);
  EXPECT_EQ(res->struct_size, sizeof(tandem_result));
  EXPECT_EQ(res->finish_reason, TANDEM_FINISH_LENGTH);
  ASSERT_EQ(res->n_tokens, 24u);
  EXPECT_EQ(std::string(res->text, res->text_len), s.text);
  EXPECT_EQ(std::strlen(res->text), res->text_len);
  EXPECT_GE(s.tokens.size(), 24u);  // one call per token, maybe one more for held-back text
  EXPECT_EQ(std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + 24), tokens_of(res.get()));
  EXPECT_GT(res->n_prompt_tokens, 0u);
  EXPECT_GE(res->prefill_ms, 0.0);
  EXPECT_GE(res->decode_ms, 0.0);
  EXPECT_EQ(res->spec_drafts, 0);
  EXPECT_EQ(res->spec_n_positions, 0u);

  // The same request through the C++ API gives the same tokens and text.
  tandem::LoadOptions lo;
  lo.model_path = model_path();
  lo.threads = 1;
  lo.context = 256;
  tandem::GenerateOptions go;
  go.max_tokens = 24;
  go.sampling.temperature = 0;
  go.ignore_eos = true;
  const auto cpp = tandem::Engine::load(lo)->generate("Hello world", go);
  EXPECT_EQ(cpp.tokens, tokens_of(res.get()));
  EXPECT_EQ(cpp.text, std::string(res->text));
  EXPECT_EQ(cpp.prompt_tokens, std::vector<int32_t>(res->prompt_tokens, res->prompt_tokens + res->n_prompt_tokens));

  // No callback and no result: allowed.
  EXPECT_EQ(tandem_generate(e.get(), "Hello world", &gp, nullptr, nullptr, nullptr), TANDEM_OK);
  // Default params (sampled, a fresh seed) work too.
  ASSERT_EQ(tandem_generate(e.get(), "Hello", nullptr, nullptr, nullptr, &r), TANDEM_OK) << tandem_last_error();
  tandem_result_free(r);
}

TEST(CApi, GenerateTokensAndStopStrings) {
  auto e = load(model_path());
  const auto prompt = repetitive_prompt();
  tandem_generate_params gp = greedy(16);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr plain(r);
  ASSERT_EQ(plain->n_tokens, 16u);
  EXPECT_EQ(std::vector<int32_t>(plain->prompt_tokens, plain->prompt_tokens + plain->n_prompt_tokens), prompt);

  // Stop at the text of the 5th generated token: generation ends there, text cut before it.
  std::vector<char> piece(64);
  size_t len = 0;
  ASSERT_EQ(tandem_detokenize(e.get(), plain->tokens + 4, 1, piece.data(), piece.size(), &len), TANDEM_OK);
  if (len == 0 || std::string(plain->text).find(piece.data()) == std::string::npos)
    GTEST_SKIP() << "token 5 has no plain text on this fixture";
  const char* stops[] = {piece.data()};
  gp.stop = stops;
  gp.n_stop = 1;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr stopped(r);
  EXPECT_EQ(stopped->finish_reason, TANDEM_FINISH_STOP);
  EXPECT_LE(stopped->n_tokens, 5u);
  EXPECT_EQ(std::string(stopped->text).find(piece.data()), std::string::npos);
}

TEST(CApi, CancelFromTheCallbackStopsAtOnce) {
  auto e = load(model_path());
  tandem_generate_params gp = greedy(64);
  Stream s;
  s.cancel_after = 3;
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate(e.get(), "Hello", &gp, collect, &s, &r), TANDEM_CANCELLED) << tandem_last_error();
  ResultPtr res(r);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->finish_reason, TANDEM_FINISH_CANCELLED);
  EXPECT_EQ(s.calls_after_cancel, 0);
  EXPECT_EQ(res->n_tokens, 3u);
  EXPECT_EQ(std::string(res->text), s.text);
  EXPECT_STREQ(tandem_last_error(), "");  // cancelling is not an error

  // With speculation a step commits several tokens; cancelling still stops at that token.
  gp.draft_mode = TANDEM_DRAFT_NGRAM;
  const auto prompt = repetitive_prompt();
  Stream s2;
  s2.cancel_after = 2;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, collect, &s2, &r), TANDEM_CANCELLED);
  ResultPtr res2(r);
  EXPECT_EQ(res2->n_tokens, 2u);
  EXPECT_EQ(s2.calls_after_cancel, 0);
}

TEST(CApi, CancelFromAnotherThread) {
  auto e = load(model_path());
  // The callback pauses at the 5th token until the other thread has cancelled, so the
  // outcome is exact: the generation must stop right after that token.
  struct Sync {
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    bool cancelled = false;
  } sync;
  auto cb = [](const char*, size_t, int32_t, void* ud) -> int {
    auto* s = static_cast<Sync*>(ud);
    std::unique_lock<std::mutex> lk(s->mu);
    if (++s->calls == 5) {
      s->cv.notify_all();
      s->cv.wait(lk, [&] { return s->cancelled; });
    }
    return 0;
  };
  std::thread canceller([&] {
    std::unique_lock<std::mutex> lk(sync.mu);
    sync.cv.wait(lk, [&] { return sync.calls >= 5; });
    EXPECT_EQ(tandem_engine_cancel(e.get()), TANDEM_OK);
    sync.cancelled = true;
    sync.cv.notify_all();
  });
  tandem_generate_params gp = greedy(200);
  tandem_result* r = nullptr;
  const tandem_status st = tandem_generate(e.get(), "Hello", &gp, cb, &sync, &r);
  canceller.join();
  ResultPtr res(r);
  ASSERT_EQ(st, TANDEM_CANCELLED) << tandem_last_error();
  EXPECT_EQ(res->finish_reason, TANDEM_FINISH_CANCELLED);
  EXPECT_EQ(res->n_tokens, 5u);

  // A cancel while nothing runs does not affect the next generation.
  ASSERT_EQ(tandem_engine_cancel(e.get()), TANDEM_OK);
  gp = greedy(8);
  ASSERT_EQ(tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr after(r);
  EXPECT_EQ(after->n_tokens, 8u);
}

TEST(CApi, CancelWithoutCallbackFromAnotherThread) {
  auto e = load(model_path());
  tandem_generate_params gp = greedy(100000);  // more than the context: stops at length otherwise
  std::atomic<bool> done{false};
  // Without a callback there is no telling when the generation has started: keep
  // cancelling until it returns (a cancel before it starts has no effect on it).
  std::thread canceller([&] {
    while (!done.load()) {
      EXPECT_EQ(tandem_engine_cancel(e.get()), TANDEM_OK);
      std::this_thread::yield();
    }
  });
  tandem_result* r = nullptr;
  const tandem_status st = tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r);
  done = true;
  canceller.join();
  ResultPtr res(r);
  ASSERT_TRUE(st == TANDEM_CANCELLED || st == TANDEM_OK) << tandem_last_error();
  if (st == TANDEM_CANCELLED) {
    EXPECT_EQ(res->finish_reason, TANDEM_FINISH_CANCELLED);
    EXPECT_LT(res->n_tokens, 256u);
  }
}

TEST(CApi, ConcurrentEnginesAndSharedEngine) {
  const auto prompt = repetitive_prompt();
  std::vector<int32_t> reference;
  {
    auto e = load(model_path());
    tandem_generate_params gp = greedy(20);
    tandem_result* r = nullptr;
    ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
    reference = tokens_of(r);
    tandem_result_free(r);
  }
  auto worker = [&](tandem_engine* e, std::vector<int32_t>* out, tandem_status* st) {
    tandem_generate_params gp = greedy(20);
    tandem_result* r = nullptr;
    *st = tandem_generate_tokens(e, prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r);
    if (r) *out = tokens_of(r);
    tandem_result_free(r);
  };
  // Separate engines, in parallel.
  {
    auto a = load(model_path()), b = load(model_path());
    std::vector<int32_t> ta, tb;
    tandem_status sa = TANDEM_ERR_INTERNAL, sb = TANDEM_ERR_INTERNAL;
    std::thread x(worker, a.get(), &ta, &sa), y(worker, b.get(), &tb, &sb);
    x.join();
    y.join();
    EXPECT_EQ(sa, TANDEM_OK);
    EXPECT_EQ(sb, TANDEM_OK);
    EXPECT_EQ(ta, reference);
    EXPECT_EQ(tb, reference);
  }
  // One engine shared by threads: generations take turns; tokenize runs alongside.
  {
    auto e = load(model_path());
    std::vector<int32_t> t[3];
    tandem_status s[3] = {TANDEM_ERR_INTERNAL, TANDEM_ERR_INTERNAL, TANDEM_ERR_INTERNAL};
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) threads.emplace_back(worker, e.get(), &t[i], &s[i]);
    for (int i = 0; i < 50; ++i) {
      int32_t ids[32];
      size_t n = 0;
      ASSERT_EQ(tandem_tokenize(e.get(), "Hello world", 0, 0, ids, 32, &n), TANDEM_OK);
    }
    for (auto& th : threads) th.join();
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(s[i], TANDEM_OK);
      EXPECT_EQ(t[i], reference);
    }
  }
}

TEST(CApi, SpeculativeGreedyTokensEqualPlain) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());  // the model drafts for itself
  tandem_model_info info;
  info.struct_size = sizeof info;
  ASSERT_EQ(tandem_engine_info(e.get(), &info), TANDEM_OK);
  EXPECT_EQ(std::string(info.draft_path), path);

  tandem_generate_params gp = greedy(32);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr plain(r);
  ASSERT_EQ(plain->n_tokens, 32u);

  for (int32_t mode : {TANDEM_DRAFT_NGRAM, TANDEM_DRAFT_MODEL}) {
    for (int32_t k : {1, 3, 5}) {
      gp = greedy(32);
      gp.draft_mode = mode;
      gp.draft_max = k;
      Stream s;
      ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, collect, &s, &r), TANDEM_OK)
          << tandem_last_error();
      ResultPtr spec(r);
      EXPECT_EQ(tokens_of(spec.get()), tokens_of(plain.get())) << "mode " << mode << " k " << k;
      EXPECT_STREQ(spec->text, plain->text);
      EXPECT_EQ(s.text, std::string(plain->text));
      EXPECT_GT(spec->spec_drafts, 0) << "mode " << mode;
      EXPECT_GT(spec->spec_drafted_tokens, 0);
      EXPECT_LE(spec->spec_accepted_tokens, spec->spec_drafted_tokens);
      EXPECT_DOUBLE_EQ(spec->spec_acceptance_rate,
                       double(spec->spec_accepted_tokens) / double(spec->spec_drafted_tokens));
      EXPECT_GE(spec->spec_mean_accepted_length, 1.0);
      EXPECT_GT(spec->spec_target_passes, 0);
      ASSERT_EQ(spec->spec_n_positions, static_cast<size_t>(k));
      const auto* acc = spec->spec_accepted_per_position;
      const auto* dr = spec->spec_drafted_per_position;
      EXPECT_EQ(std::accumulate(acc, acc + k, int64_t{0}), spec->spec_accepted_tokens);
      EXPECT_EQ(std::accumulate(dr, dr + k, int64_t{0}), spec->spec_drafted_tokens);
      if (mode == TANDEM_DRAFT_MODEL) {
        EXPECT_GT(spec->spec_draft_forwards, 0);
        EXPECT_GT(spec->spec_accepted_tokens, 0);  // the same weights agree with themselves
      }
    }
  }
}

// Token trees through the C API (appended fields): the greedy tokens stay the plain ones,
// the result counts the tree steps, and a bad shape is refused naming the field.
TEST(CApi, TokenTreesKeepTheGreedyTokens) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  tandem_generate_params gp = greedy(24);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr plain(r);
  gp.draft_mode = TANDEM_DRAFT_MODEL;
  gp.draft_max = 3;
  gp.tree_width = 3;
  gp.tree_nodes = 9;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK)
      << tandem_last_error();
  ResultPtr tree(r);
  EXPECT_EQ(tokens_of(tree.get()), tokens_of(plain.get()));
  EXPECT_GT(tree->spec_tree_steps, 0);
  EXPECT_GE(tree->spec_drafted_tokens, tree->spec_tree_steps);
  gp.tree_width = 0;
  EXPECT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
            TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("tree_width"), std::string::npos) << tandem_last_error();
}

// The speculation policy and the cost model through the C API (appended fields and a
// function): every policy keeps the plain greedy tokens; an adaptive policy
// that expects nothing to be accepted drafts less than fixed k; bad values are refused; the
// calibration measures once and then comes from its cache.
TEST(CApi, PoliciesAndCalibration) {
  tandem_generate_params d;
  ASSERT_EQ(tandem_generate_params_init(&d, sizeof d), TANDEM_OK);
  EXPECT_EQ(d.policy, nullptr);  // "fixed", as GenerateOptions
  EXPECT_EQ(tandem::GenerateOptions{}.speculative.policy, "fixed");
  EXPECT_EQ(d.alpha_prior, 0.0f);
  EXPECT_EQ(d.start_budget, 0.0f);
  EXPECT_EQ(d.lookup, 1);  // prompt lookup ahead of the draft model: on, as SpeculativeOptions
  EXPECT_EQ(d.lookup_min, 3);

  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  const std::string cache = dir() + "/costs.json";
  std::remove(cache.c_str());
  int32_t cached = -1;
  ASSERT_EQ(tandem_engine_calibrate(e.get(), 2, cache.c_str(), &cached), TANDEM_OK) << tandem_last_error();
  EXPECT_EQ(cached, 0);
  ASSERT_EQ(tandem_engine_calibrate(e.get(), 2, cache.c_str(), &cached), TANDEM_OK) << tandem_last_error();
  EXPECT_EQ(cached, 1) << "the second calibration reads the cache file";
  ASSERT_EQ(tandem_engine_calibrate(e.get(), 2, "", nullptr), TANDEM_OK) << tandem_last_error();  // no cache

  tandem_generate_params gp = greedy(32);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr plain(r);
  auto run = [&](const char* policy, float alpha_prior) {
    tandem_generate_params p = greedy(32);
    p.draft_mode = TANDEM_DRAFT_MODEL;
    p.policy = policy;
    p.alpha_prior = alpha_prior;
    tandem_result* out = nullptr;
    EXPECT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &p, nullptr, nullptr, &out), TANDEM_OK)
        << policy << ": " << tandem_last_error();
    return ResultPtr(out);
  };
  for (const char* policy : {"fixed", "confidence", "adaptive", "goodput", ""}) {
    ResultPtr spec = run(policy, 0.0f);
    ASSERT_TRUE(spec);
    EXPECT_EQ(tokens_of(spec.get()), tokens_of(plain.get())) << policy;
  }
  ResultPtr fixed = run("fixed", 0.0f), hopeless = run("adaptive", 0.01f);
  ASSERT_TRUE(fixed && hopeless);
  EXPECT_EQ(tokens_of(hopeless.get()), tokens_of(plain.get()));
  EXPECT_LT(hopeless->spec_drafted_tokens, fixed->spec_drafted_tokens)
      << "an adaptive policy expecting 1% acceptance should draft less than fixed k";

  gp = greedy(4);
  gp.draft_mode = TANDEM_DRAFT_MODEL;
  gp.policy = "medusa";
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("goodput"), std::string::npos) << tandem_last_error();
  gp.policy = "goodput";
  gp.alpha_prior = 1.5f;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  gp.alpha_prior = 0.0f;
  gp.start_budget = std::nanf("");
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  gp.start_budget = 0.0f;
  gp.lookup_min = 0;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("lookup_min"), std::string::npos) << tandem_last_error();
  // Prompt lookup on (matching one token) and off: the plain greedy tokens either way. A draft
  // model drafting alone runs a forward per drafted token; lookup's drafts take none.
  for (int32_t lookup : {0, 1}) {
    tandem_generate_params p = greedy(32);
    p.draft_mode = TANDEM_DRAFT_MODEL;
    p.lookup = lookup;
    p.lookup_min = 1;
    tandem_result* out = nullptr;
    ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &p, nullptr, nullptr, &out), TANDEM_OK)
        << tandem_last_error();
    ResultPtr spec(out);
    EXPECT_EQ(tokens_of(spec.get()), tokens_of(plain.get())) << "lookup " << lookup;
    ASSERT_GE(spec->struct_size, offsetof(tandem_result, spec_lookup_accepted_tokens) + sizeof(int64_t));
    if (lookup) {
      EXPECT_LT(spec->spec_draft_forwards, spec->spec_drafted_tokens) << "no step was lookup's";
      // Lookup's share of the totals: its steps, drafted and accepted tokens.
      EXPECT_GT(spec->spec_lookup_steps, 0);
      EXPECT_LE(spec->spec_lookup_steps, spec->spec_drafts);
      EXPECT_GE(spec->spec_lookup_drafted_tokens, spec->spec_lookup_steps);
      EXPECT_LE(spec->spec_lookup_drafted_tokens, spec->spec_drafted_tokens);
      EXPECT_LE(spec->spec_lookup_accepted_tokens, spec->spec_lookup_drafted_tokens);
      EXPECT_LE(spec->spec_lookup_accepted_tokens, spec->spec_accepted_tokens);
    } else {
      EXPECT_GE(spec->spec_draft_forwards, spec->spec_drafted_tokens);
      EXPECT_EQ(spec->spec_lookup_steps, 0);
      EXPECT_EQ(spec->spec_lookup_drafted_tokens, 0);
      EXPECT_EQ(spec->spec_lookup_accepted_tokens, 0);
    }
  }
  EXPECT_FAILS(tandem_engine_calibrate(e.get(), -1, nullptr, nullptr), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_engine_calibrate(nullptr, 2, nullptr, nullptr), TANDEM_ERR_INVALID_ARGUMENT);
}

// A reduced draft vocabulary through the C API (fields appended after 0.1.0): greedy tokens are
// still the plain ones, the size is reported, and a bad counts file is a clear load error.
TEST(CApi, ReducedDraftVocabulary) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  tandem_load_params lp;
  ASSERT_EQ(tandem_load_params_init(&lp, sizeof lp), TANDEM_OK);
  EXPECT_EQ(lp.draft_vocab, 0);
  EXPECT_EQ(lp.draft_vocab_counts, nullptr);
  lp.model_path = path.c_str();
  lp.draft_model_path = path.c_str();
  lp.threads = 1;
  lp.context = 256;
  lp.draft_vocab = 64;
  tandem_engine* raw = nullptr;
  ASSERT_EQ(tandem_engine_load(&lp, &raw), TANDEM_OK) << tandem_last_error();
  EnginePtr e(raw);
  EXPECT_EQ(info_of(e.get()).draft_vocab, 64);

  tandem_generate_params gp = greedy(24);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr plain(r);
  gp.draft_mode = TANDEM_DRAFT_MODEL;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK)
      << tandem_last_error();
  ResultPtr spec(r);
  EXPECT_EQ(tokens_of(spec.get()), tokens_of(plain.get()));
  EXPECT_GT(spec->spec_drafted_tokens, 0);

  lp.draft_vocab_counts = "/nonexistent/counts.txt";
  EXPECT_EQ(tandem_engine_load(&lp, &raw), TANDEM_ERR_LOAD) << tandem_last_error();
  EXPECT_NE(std::string(tandem_last_error()).find("/nonexistent/counts.txt"), std::string::npos) << tandem_last_error();
  lp.draft_vocab_counts = nullptr;
  lp.draft_vocab = -2;
  EXPECT_NE(tandem_engine_load(&lp, &raw), TANDEM_OK);
}

// Constrained decoding through the C API: the output follows the grammar (here one
// sentence), a bad grammar fails with INVALID_ARGUMENT naming where, and the default
// (NULL) is unconstrained.
TEST(CApi, GrammarConstrainsTheOutput) {
  auto e = load(model_path());
  tandem_generate_params gp = greedy(40);
  gp.grammar = "root ::= \"yes\" | \"no\"";
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate(e.get(), "Is it?", &gp, nullptr, nullptr, &r), TANDEM_OK) << tandem_last_error();
  ResultPtr res(r);
  const std::string text = res->text;
  EXPECT_TRUE(text == "yes" || text == "no") << text;
  EXPECT_EQ(res->finish_reason, TANDEM_FINISH_STOP);
  gp.grammar = "root ::= \"yes\" | (";
  EXPECT_FAILS(tandem_generate(e.get(), "Is it?", &gp, nullptr, nullptr, &r), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("1:"), std::string::npos) << tandem_last_error();
  tandem_generate_params d;
  ASSERT_EQ(tandem_generate_params_init(&d, sizeof d), TANDEM_OK);
  EXPECT_EQ(d.grammar, nullptr);

  // A JSON Schema's grammar: sized, written, used; unsupported keywords named.
  const char* schema = R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false})";
  size_t n = 0;
  EXPECT_FAILS(tandem_json_schema_to_grammar(schema, nullptr, 0, &n), TANDEM_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 0u);
  std::string g(n + 1, '\0');
  ASSERT_EQ(tandem_json_schema_to_grammar(schema, g.data(), g.size(), &n), TANDEM_OK) << tandem_last_error();
  g.resize(n);
  gp = greedy(200);  // a random model spends many tokens on the whitespace the grammar allows
  gp.grammar = g.c_str();
  ASSERT_EQ(tandem_generate(e.get(), "JSON:", &gp, nullptr, nullptr, &r), TANDEM_OK) << tandem_last_error();
  ResultPtr js(r);
  EXPECT_EQ(js->finish_reason, TANDEM_FINISH_STOP) << js->text;
  EXPECT_TRUE(tandem::Grammar::parse(g)->accepts(js->text)) << js->text;
  EXPECT_FAILS(tandem_json_schema_to_grammar(R"({"type":"string","not":{"const":"a"}})", nullptr, 0, &n),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("'not'"), std::string::npos) << tandem_last_error();
  EXPECT_FAILS(tandem_json_schema_to_grammar(nullptr, nullptr, 0, &n), TANDEM_ERR_INVALID_ARGUMENT);
}

// Logprobs through the C API: in the result and the stream callback, the same as the C++
// API's, unchanged by speculation; a struct from a header without `logprobs` gets none.
struct LogprobStream {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> tops;
};

int collect_logprobs(const char*, size_t, int32_t token, const tandem_token_logprobs* lp, void* user) {
  auto* s = static_cast<LogprobStream*>(user);
  if (!lp) return 0;  // the last call, flushing held-back text
  EXPECT_EQ(lp->token, token);
  s->tokens.push_back(lp->token);
  s->logprobs.push_back(lp->logprob);
  s->tops.emplace_back();
  for (size_t j = 0; j < lp->n_top; ++j) s->tops.back().emplace_back(lp->top[j].token, lp->top[j].logprob);
  return 0;
}

// The C++ API's result for the fixture model, to compare the C API's with.
tandem::GenerateResult cpp_result(const std::vector<int32_t>& prompt, const tandem::GenerateOptions& go) {
  tandem::LoadOptions lo;
  lo.model_path = model_path();
  lo.threads = 1;
  lo.context = 256;
  return tandem::Engine::load(lo)->generate_tokens(prompt, go);
}

TEST(CApi, LogprobsInTheResultAndTheStream) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  tandem::GenerateOptions go;
  go.max_tokens = 10;
  go.sampling.temperature = 0.9f;
  go.sampling.seed = 4;
  go.ignore_eos = true;
  go.logprobs = 3;
  const auto cpp = cpp_result(prompt, go);
  ASSERT_EQ(cpp.logprobs.size(), 10u);

  for (int32_t mode : {TANDEM_DRAFT_NONE, TANDEM_DRAFT_NGRAM, TANDEM_DRAFT_MODEL}) {
    tandem_generate_params gp = greedy(10);
    gp.temperature = 0.9f;
    gp.seed = 4;
    gp.logprobs = 3;
    gp.draft_mode = mode;
    gp.draft_max = 3;
    LogprobStream s;
    tandem_result* r = nullptr;
    ASSERT_EQ(tandem_generate_tokens_logprobs(e.get(), prompt.data(), prompt.size(), &gp, collect_logprobs, &s, &r),
              TANDEM_OK)
        << tandem_last_error();
    ResultPtr res(r);
    ASSERT_GE(res->struct_size, offsetof(tandem_result, n_logprobs) + sizeof(size_t));
    ASSERT_EQ(res->n_logprobs, res->n_tokens) << "mode " << mode;
    ASSERT_EQ(s.tokens, tokens_of(res.get()));
    for (size_t i = 0; i < res->n_logprobs; ++i) {
      const tandem_token_logprobs& lp = res->logprobs[i];
      EXPECT_EQ(lp.token, cpp.logprobs[i].chosen.token) << "mode " << mode << " token " << i;
      EXPECT_EQ(lp.logprob, cpp.logprobs[i].chosen.logprob) << "mode " << mode << " token " << i;
      EXPECT_EQ(lp.logprob, s.logprobs[i]);
      ASSERT_EQ(lp.n_top, 3u);
      for (size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(lp.top[j].token, cpp.logprobs[i].top[j].token);
        EXPECT_EQ(lp.top[j].logprob, cpp.logprobs[i].top[j].logprob);
        EXPECT_EQ(std::make_pair(lp.top[j].token, lp.top[j].logprob), s.tops[i][j]);
      }
    }
  }
  // The plain entry points fill the result too; a struct without the field asks for none.
  tandem_generate_params gp = greedy(4);
  gp.logprobs = 0;
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr with(r);
  ASSERT_EQ(with->n_logprobs, 4u);
  EXPECT_EQ(with->logprobs[3].n_top, 0u);
  EXPECT_LE(with->logprobs[3].logprob, 0.0f);
  gp.struct_size = offsetof(tandem_generate_params, logprobs);
  ASSERT_EQ(tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr without(r);
  EXPECT_EQ(without->n_logprobs, 0u);
  gp = greedy(4);
  gp.logprobs = 21;
  EXPECT_FAILS(tandem_generate(e.get(), "Hello", &gp, nullptr, nullptr, &r), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
}

// Prompt logprobs: the C++ API's, in the result; max_tokens 0 scores the prompt alone; a
// struct without the field asks for none.
TEST(CApi, PromptLogprobsInTheResult) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  tandem::GenerateOptions go;
  go.max_tokens = 3;
  go.sampling.temperature = 0.0f;
  go.prompt_logprobs = 2;
  const auto cpp = cpp_result(prompt, go);
  ASSERT_EQ(cpp.prompt_logprobs.size(), prompt.size() - 1);
  for (int32_t max_tokens : {3, 0}) {
    tandem_generate_params gp = greedy(max_tokens);
    gp.prompt_logprobs = 2;
    tandem_result* r = nullptr;
    ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK)
        << tandem_last_error();
    ResultPtr res(r);
    ASSERT_GE(res->struct_size, offsetof(tandem_result, n_prompt_logprobs) + sizeof(size_t));
    EXPECT_EQ(res->n_tokens, static_cast<size_t>(max_tokens));
    EXPECT_EQ(res->n_logprobs, 0u);
    ASSERT_EQ(res->n_prompt_logprobs, prompt.size() - 1);
    for (size_t i = 0; i < res->n_prompt_logprobs; ++i) {
      const tandem_token_logprobs& lp = res->prompt_logprobs[i];
      EXPECT_EQ(lp.token, prompt[i + 1]);
      EXPECT_EQ(lp.logprob, cpp.prompt_logprobs[i].chosen.logprob) << "prompt token " << i + 1;
      ASSERT_EQ(lp.n_top, 2u);
      for (size_t j = 0; j < 2; ++j) {
        EXPECT_EQ(lp.top[j].token, cpp.prompt_logprobs[i].top[j].token);
        EXPECT_EQ(lp.top[j].logprob, cpp.prompt_logprobs[i].top[j].logprob);
      }
    }
  }
  tandem_generate_params gp = greedy(2);
  gp.prompt_logprobs = 2;
  gp.struct_size = offsetof(tandem_generate_params, prompt_logprobs);
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr without(r);
  EXPECT_EQ(without->n_prompt_logprobs, 0u);
  gp = greedy(2);
  gp.prompt_logprobs = 21;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
}

// logit_bias: +100 forces a token at every step, -100 bans the plain output's first token;
// the draft model and speculation keep the biased greedy tokens; bad lists fail clearly.
// The tokens and finish reason of one tandem_generate_tokens call that must succeed.
std::pair<std::vector<int32_t>, int32_t> generated(tandem_engine* e, const std::vector<int32_t>& prompt,
                                                   const tandem_generate_params& gp) {
  tandem_result* r = nullptr;
  EXPECT_EQ(tandem_generate_tokens(e, prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK)
      << tandem_last_error();
  ResultPtr res(r);
  return r ? std::make_pair(std::vector<int32_t>(res->tokens, res->tokens + res->n_tokens), res->finish_reason)
           : std::make_pair(std::vector<int32_t>{}, int32_t{-1});
}

TEST(CApi, LogitBiasForcesAndBansTokens) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  auto run = [&](const tandem_generate_params& gp) { return generated(e.get(), prompt, gp).first; };
  const std::vector<int32_t> plain = run(greedy(8));
  ASSERT_EQ(plain.size(), 8u);
  tandem_generate_params gp = greedy(8);
  int32_t ids[] = {7, plain[0]};
  float values[] = {100.0f, 0.0f};
  gp.logit_bias_tokens = ids;
  gp.logit_bias_values = values;
  gp.n_logit_bias = 1;
  EXPECT_EQ(run(gp), std::vector<int32_t>(8, 7));
  ids[0] = plain[0];
  values[0] = -100.0f;
  const std::vector<int32_t> banned = run(gp);
  ASSERT_EQ(banned.size(), 8u);
  EXPECT_NE(banned[0], plain[0]);
  for (int32_t t : banned) EXPECT_NE(t, plain[0]);
  gp.draft_mode = TANDEM_DRAFT_MODEL;
  EXPECT_EQ(run(gp), banned);
  gp.draft_mode = TANDEM_DRAFT_NONE;
  // Errors: a token twice, a token outside the vocabulary, arrays missing.
  tandem_result* r = nullptr;
  ids[1] = ids[0];
  gp.n_logit_bias = 2;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  gp.n_logit_bias = 1;
  ids[0] = 1 << 30;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("logit_bias"), std::string::npos) << tandem_last_error();
  ids[0] = 3;
  values[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  gp.logit_bias_values = nullptr;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
}

// Stop token ids end the output at the token (the last one, no text of its own), with and
// without speculation; NULL arrays and ids outside the vocabulary are refused.
TEST(CApi, StopTokenIdsEndTheOutput) {
  const auto prompt = repetitive_prompt();
  const std::string path = model_path();
  auto e = load(path, path.c_str());
  auto run = [&](const tandem_generate_params& gp) { return generated(e.get(), prompt, gp); };
  const std::vector<int32_t> plain = run(greedy(8)).first;
  ASSERT_EQ(plain.size(), 8u);
  const size_t at = static_cast<size_t>(std::find(plain.begin(), plain.end(), plain[3]) - plain.begin());
  tandem_generate_params gp = greedy(8);
  int32_t ids[] = {plain[3]};
  gp.stop_token_ids = ids;
  gp.n_stop_token_ids = 1;
  const auto stopped = run(gp);
  EXPECT_EQ(stopped.first, std::vector<int32_t>(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(at) + 1));
  EXPECT_EQ(stopped.second, TANDEM_FINISH_STOP);
  gp.draft_mode = TANDEM_DRAFT_MODEL;
  EXPECT_EQ(run(gp), stopped);
  tandem_result* r = nullptr;
  ids[0] = 1 << 30;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("stop token id"), std::string::npos) << tandem_last_error();
  gp.stop_token_ids = nullptr;
  EXPECT_FAILS(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r),
               TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r, nullptr);
}

// tandem_chat_*: the model's template (the fixture's gpt2 vocabulary carries ChatML as
// tokenizer.chat_template; the llama one has none, so the ChatML fallback applies and its
// BOS is prepended once), buffer sizes and bad arguments.
// Without a seed every call draws a fresh one (two calls, two texts) and reports it; the
// reported seed given back reproduces the text, with or without speculation (coupled).
TEST(CApi, UnseededCallsDrawFreshSeedsAndReportThem) {
  const auto prompt = repetitive_prompt();
  // Untied embeddings: logits of order one, so two independent draws of 24 tokens do not
  // agree (the default fixture's distributions are too peaked for that).
  static const std::string path = [] {
    const std::string p = dir() + "/flat.gguf";
    tandem::test::TinyModelSpec t;
    t.tied_embeddings = false;
    tandem::test::write_tiny_model(p, t);
    return p;
  }();
  auto e = load(path, path.c_str());
  auto run = [&](uint64_t seed, int32_t mode) {
    tandem_generate_params gp = greedy(24);
    gp.temperature = 1.0f;
    gp.top_k = 0;
    gp.top_p = 1.0f;
    gp.min_p = 0.0f;
    gp.seed = seed;
    gp.draft_mode = mode;
    tandem_result* r = nullptr;
    EXPECT_EQ(tandem_generate_tokens(e.get(), prompt.data(), prompt.size(), &gp, nullptr, nullptr, &r), TANDEM_OK)
        << tandem_last_error();
    ResultPtr res(r);
    EXPECT_GE(res->struct_size, offsetof(tandem_result, seed) + sizeof(uint64_t));
    return std::make_pair(tokens_of(res.get()), res->seed);
  };
  const auto [a, seed_a] = run(TANDEM_SEED_RANDOM, TANDEM_DRAFT_NONE);
  const auto [b, seed_b] = run(TANDEM_SEED_RANDOM, TANDEM_DRAFT_NONE);
  EXPECT_NE(seed_a, seed_b);
  EXPECT_NE(a, b) << "two unseeded calls at temperature 1 gave the same 24 tokens";
  // The reported seed reproduces the text, plain and speculative.
  EXPECT_EQ(run(seed_a, TANDEM_DRAFT_NONE).first, a);
  EXPECT_EQ(run(seed_a, TANDEM_DRAFT_MODEL).first, a);
  const auto [c, seed_c] = run(12345, TANDEM_DRAFT_NONE);
  EXPECT_EQ(seed_c, 12345u);
  EXPECT_EQ(run(12345, TANDEM_DRAFT_NGRAM).first, c);
}

// Fill in the middle: the code model's markers around the two texts, as its marker texts
// parsed as control tokens give them; a model without markers (the fixture) is refused.
TEST(CApi, FimTokenizeBuildsTheCodeModelsPrompt) {
  auto tiny = load(model_path());
  size_t n = 0;
  EXPECT_FAILS(tandem_fim_tokenize(tiny.get(), "a", "b", nullptr, 0, &n), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("fill-in-the-middle"), std::string::npos) << tandem_last_error();
  EXPECT_FAILS(tandem_fim_tokenize(nullptr, "a", "b", nullptr, 0, &n), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_fim_tokenize(tiny.get(), nullptr, "b", nullptr, 0, &n), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_fim_tokenize(tiny.get(), "a", "b", nullptr, 0, nullptr), TANDEM_ERR_INVALID_ARGUMENT);

  TANDEM_REQUIRE_MODEL(coder, "qwen0.5b");
  auto e = load(coder);
  const char* prefix = "def square(x):\n    return ";
  const char* suffix = "\n\nprint(square(<|fim_middle|>3))\n";  // marker text in the code stays text
  EXPECT_FAILS(tandem_fim_tokenize(e.get(), prefix, suffix, nullptr, 0, &n), TANDEM_ERR_BUFFER_TOO_SMALL);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(tandem_fim_tokenize(e.get(), prefix, suffix, ids.data(), ids.size(), &n), TANDEM_OK) << tandem_last_error();
  auto tokens = [&](const std::string& text, int parse_special) {
    size_t m = 0;
    std::vector<int32_t> out(text.size() + 8);
    EXPECT_EQ(tandem_tokenize(e.get(), text.c_str(), 0, parse_special, out.data(), out.size(), &m), TANDEM_OK);
    out.resize(m);
    return out;
  };
  std::vector<int32_t> ref = tokens("<|fim_prefix|>", 1);
  for (const auto& part : {tokens(prefix, 0), tokens("<|fim_suffix|>", 1), tokens(suffix, 0), tokens("<|fim_middle|>", 1)})
    ref.insert(ref.end(), part.begin(), part.end());
  EXPECT_EQ(ids, ref);
  EXPECT_EQ(ref.size(), tokens(prefix, 0).size() + tokens(suffix, 0).size() + 3);
}

TEST(CApi, ChatRendersAndTokenizesWithTheModelTemplate) {
  auto e = load(model_path());
  const tandem_chat_message conv[] = {{"system", "be brief"}, {"user", "hi"}};
  const std::string expected =
      "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  size_t len = 0;
  EXPECT_FAILS(tandem_chat_render(e.get(), conv, 2, nullptr, 0, &len), TANDEM_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(len, expected.size());
  std::vector<char> text(len);  // no room for the NUL
  EXPECT_FAILS(tandem_chat_render(e.get(), conv, 2, text.data(), text.size(), &len), TANDEM_ERR_BUFFER_TOO_SMALL);
  text.resize(len + 1);
  ASSERT_EQ(tandem_chat_render(e.get(), conv, 2, text.data(), text.size(), &len), TANDEM_OK) << tandem_last_error();
  EXPECT_EQ(std::string(text.data()), expected);
  EXPECT_STREQ(tandem_last_error(), "");

  // The tokens: control-token texts parsed, nothing added (this vocabulary adds no BOS).
  size_t n = 0;
  EXPECT_FAILS(tandem_chat_tokenize(e.get(), conv, 2, nullptr, 0, &n), TANDEM_ERR_BUFFER_TOO_SMALL);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(tandem_chat_tokenize(e.get(), conv, 2, ids.data(), ids.size(), &n), TANDEM_OK) << tandem_last_error();
  size_t n_ref = 0;
  std::vector<int32_t> ref(n + 8);
  ASSERT_EQ(tandem_tokenize(e.get(), expected.c_str(), 0, 1, ref.data(), ref.size(), &n_ref), TANDEM_OK);
  ref.resize(n_ref);
  EXPECT_EQ(ids, ref);
  size_t n_plain = 0;  // parsed as text instead, the control tokens would be many pieces
  ASSERT_EQ(tandem_tokenize(e.get(), expected.c_str(), 0, 0, nullptr, 0, &n_plain), TANDEM_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(n_plain, n);
  // The tokens generate like any prompt.
  tandem_generate_params gp = greedy(4);
  gp.add_special = 0;
  tandem_result* r = nullptr;
  ASSERT_EQ(tandem_generate_tokens(e.get(), ids.data(), ids.size(), &gp, nullptr, nullptr, &r), TANDEM_OK);
  ResultPtr res(r);
  EXPECT_EQ(res->n_tokens, 4u);
  EXPECT_EQ(std::vector<int32_t>(res->prompt_tokens, res->prompt_tokens + res->n_prompt_tokens), ids);

  // Bad arguments.
  EXPECT_FAILS(tandem_chat_render(nullptr, conv, 2, nullptr, 0, &len), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_chat_render(e.get(), nullptr, 2, nullptr, 0, &len), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_chat_render(e.get(), conv, 2, nullptr, 0, nullptr), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_chat_render(e.get(), conv, 2, nullptr, 5, &len), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_chat_tokenize(e.get(), conv, 2, nullptr, 5, &n), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_FAILS(tandem_chat_tokenize(e.get(), conv, 2, nullptr, 0, nullptr), TANDEM_ERR_INVALID_ARGUMENT);
  const tandem_chat_message null_role[] = {{nullptr, "x"}};
  EXPECT_FAILS(tandem_chat_render(e.get(), null_role, 1, nullptr, 0, &len), TANDEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tandem_last_error()).find("message 0"), std::string::npos) << tandem_last_error();

  // A SentencePiece-style vocabulary without a template: ChatML, with the BOS it wants, once.
  tandem::test::TinyModelSpec spec;
  spec.tokenizer = "llama";
  const std::string llama = dir() + "/tiny-llama-chat.gguf";
  tandem::test::write_tiny_model(llama, spec);
  auto l = load(llama);
  ASSERT_EQ(tandem_chat_tokenize(l.get(), conv, 2, nullptr, 0, &n), TANDEM_ERR_BUFFER_TOO_SMALL);
  ids.assign(n, 0);
  ASSERT_EQ(tandem_chat_tokenize(l.get(), conv, 2, ids.data(), ids.size(), &n), TANDEM_OK) << tandem_last_error();
  std::vector<int32_t> with_bos(64);
  ASSERT_EQ(tandem_tokenize(l.get(), "a", 1, 0, with_bos.data(), with_bos.size(), &n_ref), TANDEM_OK);
  ASSERT_GE(n_ref, 2u);
  EXPECT_EQ(ids.front(), with_bos.front());
  EXPECT_NE(ids[1], with_bos.front());
}

}  // namespace
