#include "engine/hf/hf_tokenizer.hpp"

#include <map>
#include <stdexcept>
#include <unordered_map>

#include "engine/hf/hf_json.hpp"

namespace tandem::hf {
namespace {

// The Split regexes of published tokenizer.json files and the GGUF pre-tokenizer names the
// engine knows them by.
struct KnownSplit {
  const char* regex;
  const char* pre;
  bool ignore_merges;  // whole-word vocabulary hits skip the merges (Llama 3)
};
constexpr KnownSplit kSplits[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2", false},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe", true},
};

// GGUF token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

const boost::json::object* object_at(const boost::json::object& o, const char* key) {
  const boost::json::value* v = o.if_contains(key);
  return v && v->is_object() ? &v->as_object() : nullptr;
}

std::string type_of(const boost::json::object* o) {
  if (!o) return "";
  const boost::json::value* t = o->if_contains("type");
  return t && t->is_string() ? std::string(t->as_string()) : "";
}

// The steps of a Sequence (or the one step).
std::vector<const boost::json::object*> steps(const boost::json::object* o, const char* list_key) {
  std::vector<const boost::json::object*> out;
  if (!o) return out;
  if (type_of(o) == "Sequence") {
    const boost::json::value* l = o->if_contains(list_key);
    if (l && l->is_array())
      for (const boost::json::value& s : l->as_array())
        if (s.is_object()) out.push_back(&s.as_object());
    return out;
  }
  out.push_back(o);
  return out;
}

// A special token named in tokenizer_config.json: a string, or an AddedToken object.
std::optional<std::string> token_text(const boost::json::object& cfg, const char* key) {
  const boost::json::value* v = cfg.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object())
    if (const boost::json::value* c = v->as_object().if_contains("content"); c && c->is_string())
      return std::string(c->as_string());
  return std::nullopt;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::unordered_map<std::string, int32_t> ids;
  int32_t id(const std::string& text) const {
    const auto it = ids.find(text);
    return it == ids.end() ? -1 : it->second;
  }
};

}  // namespace

void write_tokenizer_metadata(const std::string& dir, gguf::Writer& w) {
  const std::string tok_path = dir + "/tokenizer.json";
  if (!file_exists(tok_path)) throw std::runtime_error(tok_path + ": missing (the folder has no tokenizer)");
  const boost::json::object tok = read_json_object(tok_path, size_t{512} << 20);
  auto fail = [&](const std::string& what) -> void { throw std::runtime_error(tok_path + ": " + what); };

  const boost::json::object* model = object_at(tok, "model");
  if (!model) fail("no 'model'");
  if (type_of(model) != "BPE") fail("tokenizer model '" + type_of(model) + "' is not supported (BPE only)");
  const boost::json::object* vocab_obj = object_at(*model, "vocab");
  if (!vocab_obj || vocab_obj->empty()) fail("model.vocab is missing or empty");

  // ---- the kind: byte-level or SentencePiece-style ----
  const bool byte_fallback = get_bool(*model, "byte_fallback", tok_path).value_or(false);
  const boost::json::object* normalizer = object_at(tok, "normalizer");
  const boost::json::object* pre_tok = object_at(tok, "pre_tokenizer");
  bool nfc = false, spm = false, prepend_space = false;
  for (const boost::json::object* s : steps(normalizer, "normalizers")) {
    const std::string t = type_of(s);
    if (t == "NFC") {
      nfc = true;
    } else if (t == "Replace") {
      const boost::json::object* pat = object_at(*s, "pattern");
      const auto from = pat ? get_string(*pat, "String", tok_path) : std::nullopt;
      const auto to = get_string(*s, "content", tok_path);
      if (from != std::string(" ") || to != std::string("\xE2\x96\x81"))
        fail("normalizer Replace other than ' ' → '▁' is not supported");
      spm = true;
    } else if (t == "Prepend") {
      if (get_string(*s, "prepend", tok_path) != std::string("\xE2\x96\x81")) fail("normalizer Prepend other than '▁' is not supported");
      prepend_space = true;
    } else {
      fail("normalizer '" + t + "' is not supported (NFC, or SentencePiece's Replace/Prepend)");
    }
  }
  std::string pre = "default";
  bool ignore_merges = get_bool(*model, "ignore_merges", tok_path).value_or(false);
  if (spm) {
    if (nfc) fail("an NFC normalizer with SentencePiece-style pieces is not supported");
    // A pre-tokenizer here (Metaspace's prepend scheme and splitting) would change the pieces
    // the engine's SentencePiece-style encoder makes: refused, not ignored.
    for (const boost::json::object* s : steps(pre_tok, "pretokenizers"))
      fail("pre-tokenizer '" + type_of(s) + "' after SentencePiece's normalizer is not supported");
  } else {
    const std::vector<const boost::json::object*> st = steps(pre_tok, "pretokenizers");
    if (st.empty() || type_of(st.back()) != "ByteLevel") {
      std::string what = "pre-tokenizer ";
      what += pre_tok ? type_of(pre_tok) : std::string("(none)");
      fail(what + " is not supported (ByteLevel, after a known Split or Digits)");
    }
    if (get_bool(*st.back(), "add_prefix_space", tok_path).value_or(false)) fail("ByteLevel add_prefix_space is not supported");
    const bool own_regex = get_bool(*st.back(), "use_regex", tok_path).value_or(true);
    if (st.size() == 1 && own_regex) {
      pre = "gpt2";
    } else if (st.size() == 2 && own_regex && type_of(st[0]) == "Digits" &&
               get_bool(*st[0], "individual_digits", tok_path).value_or(false)) {
      pre = "smollm";
    } else if (st.size() == 2 && !own_regex && type_of(st[0]) == "Split") {
      const boost::json::object* pat = object_at(*st[0], "pattern");
      const auto regex = pat ? get_string(*pat, "Regex", tok_path) : std::nullopt;
      if (get_string(*st[0], "behavior", tok_path).value_or("") != "Isolated" ||
          get_bool(*st[0], "invert", tok_path).value_or(false))
        fail("Split pre-tokenizer other than Isolated is not supported");
      const KnownSplit* k = nullptr;
      for (const KnownSplit& s : kSplits)
        if (regex && *regex == s.regex) k = &s;
      if (!k) {
        std::string what = "pre-tokenizer regex ";
        what += regex ? *regex : std::string("(none)");
        fail(what + " is not one the engine knows");
      }
      pre = k->pre;
      if (k->ignore_merges != ignore_merges) fail("model.ignore_merges differs from what pre-tokenizer '" + pre + "' implies");
    } else {
      fail("pre-tokenizer sequence is not one the engine knows (ByteLevel alone, Digits + ByteLevel, Split + ByteLevel)");
    }
    if (ignore_merges && pre != "llama-bpe") fail("model.ignore_merges is not supported with pre-tokenizer '" + pre + "'");
  }
  if (spm && !byte_fallback) fail("SentencePiece-style BPE without byte_fallback is not supported");
  if (!spm && byte_fallback) fail("byte_fallback with a byte-level pre-tokenizer is not supported");

  // ---- the vocabulary: model.vocab, then the added tokens (which may extend it) ----
  Vocab v;
  int64_t max_id = -1;
  std::vector<std::pair<int64_t, std::string>> entries;
  for (const auto& kv : *vocab_obj) {
    if (!kv.value().is_int64() && !kv.value().is_uint64()) fail("model.vocab id of '" + std::string(kv.key()) + "' is not an integer");
    const int64_t id = kv.value().is_int64() ? kv.value().as_int64() : static_cast<int64_t>(std::min<uint64_t>(kv.value().as_uint64(), INT64_MAX));
    if (id < 0 || id >= (int64_t{1} << 24)) fail("model.vocab id " + std::to_string(id) + " is out of range");
    entries.emplace_back(id, std::string(kv.key()));
    max_id = std::max(max_id, id);
  }
  struct Added {
    int64_t id;
    std::string text;
    bool special;
  };
  std::vector<Added> added;
  if (const boost::json::value* at = tok.if_contains("added_tokens"); at && at->is_array()) {
    for (const boost::json::value& a : at->as_array()) {
      if (!a.is_object()) fail("added_tokens entry is not an object");
      const boost::json::object& o = a.as_object();
      const auto id = get_int(o, "id", tok_path);
      const auto content = get_string(o, "content", tok_path);
      if (!id || !content || *id < 0 || *id >= (int64_t{1} << 24)) fail("added_tokens entry without a valid id and content");
      if (get_bool(o, "lstrip", tok_path).value_or(false) || get_bool(o, "rstrip", tok_path).value_or(false))
        fail("added token '" + *content + "' strips whitespace (lstrip/rstrip), which is not supported");
      // Matched in the raw text: how the engine (and llama.cpp) never match in the normalized
      // text for byte-level vocabularies, and what added_tokens_raw asks of SentencePiece ones.
      if (get_bool(o, "normalized", tok_path).value_or(false) && spm)
        fail("added token '" + *content + "' is matched in normalized text (normalized: true), which is not supported");
      added.push_back({*id, *content, get_bool(o, "special", tok_path).value_or(false)});
      max_id = std::max(max_id, *id);
    }
  }
  v.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  v.types.assign(static_cast<size_t>(max_id + 1), kUnused);
  std::vector<bool> filled(static_cast<size_t>(max_id + 1), false);
  for (auto& [id, text] : entries) {
    if (filled[static_cast<size_t>(id)]) fail("model.vocab id " + std::to_string(id) + " is used twice");
    filled[static_cast<size_t>(id)] = true;
    int32_t type = kNormal;
    if (spm && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') type = kByte;
    v.types[static_cast<size_t>(id)] = type;
    v.tokens[static_cast<size_t>(id)] = std::move(text);
  }
  for (const Added& a : added) {
    const size_t i = static_cast<size_t>(a.id);
    if (filled[i] && v.tokens[i] != a.text)
      fail("added token '" + a.text + "' has id " + std::to_string(a.id) + ", which model.vocab gives '" + v.tokens[i] + "'");
    v.tokens[i] = a.text;
    v.types[i] = a.special ? kControl : kUserDefined;
    filled[i] = true;
  }
  // Ids no token has (some vocabularies skip a few): placeholders nothing can produce.
  for (size_t i = 0; i < filled.size(); ++i)
    if (!filled[i]) v.tokens[i] = "<unused-" + std::to_string(i) + ">";
  for (size_t i = 0; i < v.tokens.size(); ++i) v.ids.emplace(v.tokens[i], static_cast<int32_t>(i));

  // ---- merges: "a b" strings (split at the first space) or [a, b] pairs ----
  std::vector<std::pair<std::string, std::string>> merges;
  if (const boost::json::value* m = model->if_contains("merges"); m && m->is_array()) {
    merges.reserve(m->as_array().size());
    for (const boost::json::value& x : m->as_array()) {
      if (x.is_string()) {
        const std::string_view s(x.as_string());
        const size_t sp = s.find(' ');
        if (sp == std::string_view::npos) fail("model.merges entry '" + std::string(s) + "' has no space");
        merges.emplace_back(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
      } else if (x.is_array() && x.as_array().size() == 2 && x.as_array()[0].is_string() && x.as_array()[1].is_string()) {
        merges.emplace_back(std::string(x.as_array()[0].as_string()), std::string(x.as_array()[1].as_string()));
      } else {
        fail("model.merges entry is neither \"a b\" nor [a, b]");
      }
    }
  }
  if (merges.empty()) fail("model.merges is empty");

  const std::string cfg_path = dir + "/tokenizer_config.json";
  const boost::json::object cfg = file_exists(cfg_path) ? read_json_object(cfg_path) : boost::json::object();
  auto special_id = [&](const char* key) -> int32_t {
    const std::optional<std::string> t = token_text(cfg, key);
    if (!t) return -1;
    const int32_t id = v.id(*t);
    if (id < 0) throw std::runtime_error(cfg_path + ": " + key + " '" + *t + "' is not in the vocabulary");
    return id;
  };
  int32_t bos = special_id("bos_token"), eos = special_id("eos_token");
  const int32_t unk = special_id("unk_token"), pad = special_id("pad_token");
  if (unk >= 0) v.types[static_cast<size_t>(unk)] = kUnknown;
  if (const std::optional<std::string> unk_text = get_string(*model, "unk_token", tok_path); unk_text && unk < 0)
    if (const int32_t id = v.id(*unk_text); id >= 0) v.types[static_cast<size_t>(id)] = kUnknown;

  // generation_config.json: the ids that end generation (one or a list); the first that is
  // not the tokenizer's EOS becomes the end-of-turn token.
  int32_t eot = -1;
  if (const std::string gen_path = dir + "/generation_config.json"; file_exists(gen_path)) {
    const boost::json::object gen = read_json_object(gen_path);
    std::vector<int64_t> ids;
    if (const boost::json::value* e = gen.if_contains("eos_token_id"); e && !e->is_null()) {
      if (e->is_int64()) ids.push_back(e->as_int64());
      else if (e->is_array())
        for (const boost::json::value& x : e->as_array())
          if (x.is_int64()) ids.push_back(x.as_int64());
    }
    for (const int64_t id : ids) {
      if (id < 0 || id >= static_cast<int64_t>(v.tokens.size()))
        throw std::runtime_error(gen_path + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary");
      if (eos < 0) eos = static_cast<int32_t>(id);
      else if (id != eos && eot < 0) eot = static_cast<int32_t>(id);
    }
    if (bos < 0)
      if (const auto b = get_int(gen, "bos_token_id", gen_path); b && *b >= 0 && *b < static_cast<int64_t>(v.tokens.size()))
        bos = static_cast<int32_t>(*b);
  }

  // Whether encoding adds BOS: tokenizer_config.json says so, or the post-processor's
  // template starts with a special token.
  std::optional<bool> add_bos = get_bool(cfg, "add_bos_token", cfg_path);
  if (!add_bos) {
    add_bos = false;
    for (const boost::json::object* p : steps(object_at(tok, "post_processor"), "processors"))
      if (type_of(p) == "TemplateProcessing")
        if (const boost::json::value* single = p->if_contains("single");
            single && single->is_array() && !single->as_array().empty() && single->as_array()[0].is_object() &&
            single->as_array()[0].as_object().if_contains("SpecialToken"))
          add_bos = true;
  }
  const bool add_eos = get_bool(cfg, "add_eos_token", cfg_path).value_or(false);

  // The chat template: chat_template.jinja, or tokenizer_config.json's (a string, or a list
  // of named templates of which "default" is the chat one).
  std::optional<std::string> chat;
  if (file_exists(dir + "/chat_template.jinja")) {
    chat = read_text_file(dir + "/chat_template.jinja");
  } else if (const boost::json::value* ct = cfg.if_contains("chat_template"); ct && !ct->is_null()) {
    if (ct->is_string()) {
      chat = std::string(ct->as_string());
    } else if (ct->is_array()) {
      for (const boost::json::value& e : ct->as_array())
        if (e.is_object() && get_string(e.as_object(), "name", cfg_path) == std::string("default"))
          chat = get_string(e.as_object(), "template", cfg_path);
    }
  }

  w.set_string("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm) w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_int32_array("tokenizer.ggml.token_type", v.types);
  if (spm) {
    // SentencePiece merges the pair whose piece scores best; a tokenizer.json lists the
    // merges best first, so a piece's score is minus the rank of the first merge making it.
    std::vector<float> scores(v.tokens.size(), -1e9f);
    for (size_t r = 0; r < merges.size(); ++r) {
      const int32_t id = v.id(merges[r].first + merges[r].second);
      if (id >= 0 && scores[static_cast<size_t>(id)] == -1e9f) scores[static_cast<size_t>(id)] = -static_cast<float>(r);
    }
    w.set_float_array("tokenizer.ggml.scores", scores);
    w.set_bool("tokenizer.ggml.add_space_prefix", prepend_space);
  } else {
    // Byte-level pieces never hold a space (the byte alphabet spells it 'Ġ'), so the engine's
    // "left right" form can hold every merge.
    std::vector<std::string> joined;
    joined.reserve(merges.size());
    for (const auto& [a, b] : merges) {
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        fail("a byte-level merge has a piece with a space ('" + a + "', '" + b + "')");
      joined.push_back(a + " " + b);
    }
    w.set_string_array("tokenizer.ggml.merges", joined);
  }
  if (nfc) w.set_string("tandem.tokenizer.normalizer", "nfc");  // no GGUF key records it
  if (spm) w.set_bool("tandem.tokenizer.added_tokens_raw", true);
  if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  if (eot >= 0) w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(eot));
  if (pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(pad));
  if (unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unk));
  w.set_bool("tokenizer.ggml.add_bos_token", *add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", add_eos);
  if (chat) w.set_string("tokenizer.chat_template", *chat);
}

}  // namespace tandem::hf
