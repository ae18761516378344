#include "draft/vocab_ranking.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <numeric>
#include <stdexcept>

namespace tandem {
namespace {
constexpr const char* kMagic = "tandem-token-counts";

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace

void TokenCounts::add(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab)
      throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                                  std::to_string(n_vocab) + ")");
    ++counts[static_cast<size_t>(id)];
  }
}

uint64_t TokenCounts::total() const { return std::accumulate(counts.begin(), counts.end(), uint64_t{0}); }

void save_token_counts(const std::string& path, const TokenCounts& c) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error(path + ": cannot be written");
  f << kMagic << " 1 " << c.n_vocab << "\n";
  for (int32_t id = 0; id < c.n_vocab; ++id)
    if (c.counts[static_cast<size_t>(id)] > 0) f << id << " " << c.counts[static_cast<size_t>(id)] << "\n";
  f.flush();
  if (!f) throw std::runtime_error(path + ": write failed");
}

TokenCounts load_token_counts(const std::string& path, int32_t n_vocab) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot be read");
  std::string line;
  auto fail = [&](size_t lineno, const std::string& why) {
    throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + why);
  };
  if (!std::getline(f, line)) fail(1, "empty (expected a token counts file from `tandem draft-vocab`)");
  const std::string head = std::string(kMagic) + " 1 ";
  int32_t n = 0;
  if (line.rfind(head, 0) != 0 || !parse_number(std::string_view(line).substr(head.size()), n) || n <= 0)
    fail(1, "not a token counts file (expected \"" + head + "<n_vocab>\")");
  if (n_vocab > 0 && n != n_vocab)
    fail(1, "counts for a vocabulary of " + std::to_string(n) + " tokens; the model has " + std::to_string(n_vocab));
  TokenCounts c(n);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (size_t lineno = 2; std::getline(f, line); ++lineno) {
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    int32_t id = -1;
    uint64_t count = 0;
    if (sp == std::string::npos || !parse_number(std::string_view(line).substr(0, sp), id) ||
        !parse_number(std::string_view(line).substr(sp + 1), count))
      fail(lineno, "expected \"<id> <count>\"");
    if (id < 0 || id >= n) fail(lineno, "token id " + std::to_string(id) + " outside the vocabulary");
    if (seen[static_cast<size_t>(id)]) fail(lineno, "token id " + std::to_string(id) + " listed twice");
    seen[static_cast<size_t>(id)] = true;
    c.counts[static_cast<size_t>(id)] = count;
  }
  return c;
}

std::vector<int32_t> rank_tokens(const TokenCounts& c) {
  std::vector<int32_t> r = rank_by_id(c.n_vocab);
  std::stable_sort(r.begin(), r.end(), [&](int32_t a, int32_t b) {
    return c.counts[static_cast<size_t>(a)] > c.counts[static_cast<size_t>(b)];
  });
  return r;
}

std::vector<int32_t> rank_by_id(int32_t n_vocab) {
  std::vector<int32_t> r(static_cast<size_t>(std::max(n_vocab, 0)));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

std::vector<int32_t> draft_vocab_ids(std::span<const int32_t> ranking, int32_t n, std::span<const int32_t> always) {
  const size_t take = std::min(ranking.size(), static_cast<size_t>(std::max(n, 0)));
  std::vector<int32_t> ids(ranking.begin(), ranking.begin() + static_cast<ptrdiff_t>(take));
  ids.insert(ids.end(), always.begin(), always.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace tandem
