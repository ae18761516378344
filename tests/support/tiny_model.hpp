// Tiny random-weight models written as real GGUF files, with the tensor names, shapes
// and metadata keys llama.cpp's files use, so the whole loading and forward path can be
// tested without downloading anything. Weights are random but scaled so activations stay
// of order one; the tokenizer vocabulary is genuine (see tiny_vocab.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace tandem::test {

struct TinyModelSpec {
  std::string arch = "llama";  // "llama" | "qwen2" | "gemma3"
  int n_vocab = 320, n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 96, n_ctx = 512;
  int head_dim = 0;                // 0 = n_embd / n_head (gemma3 may differ)
  DType weight_type = DType::F32;  // 2-D matmul weights (attn q/k/v/o, ffn gate/up/down, output)
  // attn_v and ffn_down in another type (F32: weight_type's), as Q4_K_M mixes Q6_K into
  // half the layers: the odd-numbered ones here.
  DType mixed_type = DType::F32;
  DType embd_type = DType::F32;    // token_embd
  bool tied_embeddings = true;     // no output.weight
  float rope_theta = 10000.f, rms_eps = 1e-5f;
  std::string tokenizer = "gpt2";  // "gpt2" (byte-level BPE) | "llama" (SentencePiece-style)
  uint64_t seed = 1;
  float weight_scale = 0.f;  // 0 = uniform with std 1/sqrt(fan_in); else the uniform amplitude
  int sliding_window = 8;    // gemma3 only: attention.sliding_window
  // Rows of the embedding and output matrices; 0 = n_vocab. More rows than tokens are
  // padding ids no token text has (as Qwen2.5's 151,936 vs 152,064): a model can still
  // predict them, which is what pairs with different padding must cope with.
  int vocab_rows = 0;
  // Float weights get relative noise of this amplitude on top (other random numbers, same
  // seed otherwise): a draft that agrees with the unperturbed target often but not always.
  float perturb = 0.f;
  // -1 = the vocabulary's own. Any other id becomes the EOS token, so that tests can have a
  // token the random weights actually emit end the generation (the real one never comes).
  int eos_id = -1;
  // Rows of the output matrix (tied_embeddings off, F32 weights) written as NaN: tokens whose
  // logits are always NaN, which no sampler may pick (a "no possible token" case).
  std::vector<int32_t> nan_output_rows = {};
};

// Writes the model to `path` (GGUF v3). Throws std::invalid_argument for an impossible
// spec (unknown arch/tokenizer, head counts that do not divide, a weight type whose
// block size does not divide a row length, a type the engine cannot use as a weight).
// Weights of quantized types come from random_blocks() (tests/support/random_blocks.hpp).
void write_tiny_model(const std::string& path, const TinyModelSpec& spec);

// A target and two drafts over its vocabulary, written into `dir`: the target as `spec`;
// a close draft (the same weights stored in F16: agrees often, not always); a far draft
// (seed 77, one layer: rarely agrees).
struct TinyPair {
  std::string target, close_draft, far_draft;
};
TinyPair write_tiny_pair(const std::string& dir, const TinyModelSpec& spec);

}  // namespace tandem::test
