// Tokenizers: encode arbitrary bytes, decode arbitrary ids (in range or not), and stream
// decoding. The tokenizers are genuine small vocabularies (tests/support/tiny_vocab.hpp):
// byte-level BPE under each pre-tokenizer and SentencePiece-style; with
// TANDEM_FUZZ_TOKENIZER_MODELS=a.gguf,b.gguf the real models' tokenizers join them
// (bench/fuzz.sh passes the models it finds).
//
// Input: byte 0 picks the tokenizer, byte 1 the mode and flags, the rest is text (encode)
// or little-endian int32 ids (decode).
// Invariants: encode gives ids inside the vocabulary; for byte-level BPE, valid UTF-8
// survives decode(encode(text)) unchanged; the stream decoder's output is valid UTF-8
// and, when the plain decode is valid UTF-8, the same text.
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.hpp"
#include "engine/text/tokenizer.hpp"
#include "engine/text/utf8.hpp"
#include "tests/fuzz/fuzz_target.hpp"
#include "tests/support/tiny_vocab.hpp"

using namespace tandem;

namespace {

struct Entry {
  std::unique_ptr<Tokenizer> tok;
  bool byte_level = false;
  // Bytes the vocabulary has no token for: SmolLM2's lacks some control bytes (e.g. 0x04),
  // which then encode as its unknown token (tokenizer.ggml.unknown_token_id) and cannot
  // round-trip.
  std::array<bool, 256> unspelled{};
};

Entry make_entry(std::unique_ptr<Tokenizer> tok, bool byte_level) {
  Entry e{std::move(tok), byte_level, {}};
  e.unspelled.fill(true);
  for (int32_t id = 0; id < e.tok->n_vocab(); ++id) {
    if (e.tok->is_control(id)) continue;
    const std::string piece = e.tok->token_to_piece(id);
    if (piece.size() == 1) e.unspelled[static_cast<unsigned char>(piece[0])] = false;
  }
  return e;
}
std::vector<Entry> g_toks;

std::unique_ptr<Tokenizer> gpt2(const std::string& pre) {
  return Tokenizer::from_data(test::tokenizer_data(test::build_gpt2_vocab(600), "gpt2", pre));
}

std::unique_ptr<Tokenizer> llama() {
  return Tokenizer::from_data(test::tokenizer_data(test::build_llama_vocab(700), "llama"));
}

std::string escaped(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "\"";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz_quiet_logs();
  for (const char* pre : {"default", "smollm", "qwen2", "llama-bpe"}) g_toks.push_back(make_entry(gpt2(pre), true));
  g_toks.push_back(make_entry(llama(), false));
  if (const char* env = std::getenv("TANDEM_FUZZ_TOKENIZER_MODELS")) {
    std::stringstream ss(env);
    std::string path;
    while (std::getline(ss, path, ',')) {
      if (path.empty()) continue;
      const auto f = gguf::File::open(path);
      auto tok = Tokenizer::from_gguf(*f);
      const bool bl = tok->model() == "gpt2";
      g_toks.push_back(make_entry(std::move(tok), bl));
      std::fprintf(stderr, "fuzz_tokenizer: + %s\n", path.c_str());
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Entry& e = g_toks[data[0] % g_toks.size()];
  const Tokenizer& tok = *e.tok;
  const uint8_t mode = data[1];
  const bool add_special = mode & 1, parse_special = mode & 2, skip_special = mode & 4;
  data += 2;
  size -= 2;
  std::vector<int32_t> ids;
  if (mode & 8) {  // decode arbitrary ids, most inside the vocabulary
    for (size_t i = 0; i + 4 <= size; i += 4) {
      int32_t id;
      std::memcpy(&id, data + i, 4);
      if (!(mode & 16)) id = static_cast<int32_t>(static_cast<uint32_t>(id) % static_cast<uint32_t>(tok.n_vocab() + 8));
      ids.push_back(id);
    }
  } else {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    ids = tok.encode(text, add_special, parse_special);
    for (int32_t id : ids) fuzz_check(id >= 0 && id < tok.n_vocab());
    bool spelled = true;
    for (unsigned char c : text) spelled = spelled && !e.unspelled[c];
    if (e.byte_level && !add_special && !parse_special && spelled && utf8::is_valid(text)) {
      const std::string back = tok.decode(ids);
      if (back != text) {
        std::string ids_s;
        for (int32_t id : ids) ids_s += std::to_string(id) + ":" + escaped(tok.token_text(id)) + " ";
        std::fprintf(stderr, "round trip of %s gave %s (ids %s)\n", escaped(std::string(text)).c_str(),
                     escaped(back).c_str(), ids_s.c_str());
      }
      fuzz_check(back == text);
    }
  }
  const std::string plain = tok.decode(ids, skip_special);
  for (int32_t id : ids) {
    (void)tok.token_to_piece(id);
    (void)tok.token_text(id);
    (void)tok.token_type(id);
    (void)tok.is_eog(id);
  }
  StreamDecoder sd(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    streamed += piece;
  }
  streamed += sd.flush();
  fuzz_check(utf8::is_valid(streamed));
  if (utf8::is_valid(plain)) fuzz_check(streamed == plain);
  return 0;
}
