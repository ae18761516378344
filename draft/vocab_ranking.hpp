// The frequency-ranked draft vocabulary (FR-Spec, arXiv 2502.14856): the draft computes
// logits for the N most frequent tokens only (engine/model/output_subset.hpp), ranked by
// token counts over text.
//
// Where the counts come from: `tandem draft-vocab` tokenizes text files with the model's
// tokenizer (the project's own sources and docs are a code-heavy corpus it ships; a user's
// prompts and the target's own outputs are better still) and writes them to a counts file;
// docs/speculation.md has the commands. Without a counts file the ranking is by token id:
// BPE vocabularies number their tokens in merge order, itself a frequency ranking of the
// tokenizer's training text.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem {

// Token counts over some text, for one vocabulary size.
struct TokenCounts {
  int32_t n_vocab = 0;
  std::vector<uint64_t> counts;  // [n_vocab]
  explicit TokenCounts(int32_t n = 0) : n_vocab(n), counts(static_cast<size_t>(n), 0) {}
  // Throws std::invalid_argument for an id outside [0, n_vocab).
  void add(std::span<const int32_t> ids);
  uint64_t total() const;
};

// The file: a line "tandem-token-counts 1 <n_vocab>", then "<id> <count>" for each token
// counted. load_token_counts throws std::runtime_error naming the file and line (unreadable,
// not such a file, ids out of range or repeated, counts not numbers), and for a vocabulary
// size other than `n_vocab` when that is given.
void save_token_counts(const std::string& path, const TokenCounts& c);
TokenCounts load_token_counts(const std::string& path, int32_t n_vocab = 0);

// Every id, most frequent first; ties (never-seen tokens among them) by id.
std::vector<int32_t> rank_tokens(const TokenCounts& c);
std::vector<int32_t> rank_by_id(int32_t n_vocab);

// The draft's vocabulary: the first n of `ranking` and every id of `always` (end-of-
// generation tokens, so that a draft can end a turn), ascending.
std::vector<int32_t> draft_vocab_ids(std::span<const int32_t> ranking, int32_t n, std::span<const int32_t> always);

}  // namespace tandem
