#include "draft/model_proposer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "draft/token_tree.hpp"
#include "engine/model/prefill.hpp"

namespace tandem {
namespace {
// The draft catches up on its context in prompt-sized chunks (per sequence per pass).
constexpr size_t kChunk = kPrefillChunk;

// The draft's probability of its argmax at temperature 1: the confidence measure for
// draft_p_min when the request is greedy (its final distribution is a point mass).
float max_softmax_prob(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double z = 0.0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  return static_cast<float>(1.0 / z);
}

// The same over what a grammar's mask allows (the device masks the row before it measures).
float greedy_confidence(std::span<const float> logits, const TokenMask* mask) {
  if (!mask) return max_softmax_prob(logits);
  std::vector<float> allowed(logits.begin(), logits.end());
  for (size_t i = 0; i < allowed.size(); ++i)
    if (!mask_allows(*mask, static_cast<int32_t>(i))) allowed[i] = -std::numeric_limits<float>::infinity();
  return max_softmax_prob(allowed);
}

// The context as the draft can read it. A target with a larger (padded) vocabulary may emit
// an id the draft has no embedding for; the draft reads token 0 there instead. Its guesses
// after that may be worse, never wrong: the target verifies every drafted token.
std::vector<int32_t> as_draft_tokens(std::span<const int32_t> ids, int32_t draft_vocab) {
  std::vector<int32_t> out(ids.begin(), ids.end());
  for (int32_t& t : out)
    if (t >= draft_vocab) t = 0;
  return out;
}

int32_t blocks_for(int32_t positions, int32_t block_size) { return (positions + block_size - 1) / block_size; }
}  // namespace

ModelProposer::ModelProposer(Transformer& draft, DraftProbs* device_probs)
    : tf_(draft), device_probs_(device_probs), seq_(draft.cache()) {}

void ModelProposer::reset() {
  seq_.clear();
  cached_.clear();
  fed_tree_.clear();
  prefilled_ = false;
}

size_t ModelProposer::prefill_pending(std::span<const int32_t> context) const {
  if (prefilled_ || context.size() < 2) return 0;
  return context.size() - 1 - std::min(cached_.size(), context.size() - 1);
}

size_t ModelProposer::reusable_prefix(std::span<const int32_t> context) const {
  size_t common = 0;
  while (common < cached_.size() && common < context.size() && cached_[common] == context[common]) ++common;
  return std::min(common, context.size() - 1);
}

size_t ModelProposer::catch_up_tokens(std::span<const int32_t> context) const {
  return context.empty() ? 0 : context.size() - reusable_prefix(context);
}

void ModelProposer::reclaim_tree(std::span<const int32_t> context) {
  if (fed_tree_.empty()) return;
  const size_t base = cached_.size();  // the tree's nodes were fed from here on
  std::vector<int32_t> from;
  if (context.size() > base && std::equal(cached_.begin(), cached_.end(), context.begin())) {
    // Down the tree along the context, leaving its last token to be fed again (fresh logits).
    int32_t node = -1;
    for (size_t i = base; i + 1 < context.size(); ++i) {
      int32_t next = -1;
      for (size_t f = 0; f < fed_tree_.size() && next < 0; ++f)
        if (fed_tree_[f].parent == node && fed_tree_[f].token == context[i]) next = static_cast<int32_t>(f);
      if (next < 0) break;
      from.push_back(static_cast<int32_t>(base) + next);
      node = next;
    }
  }
  fed_tree_.clear();
  if (!from.empty()) tf_.move_kv(seq_, from, static_cast<int32_t>(base));
  tree_kept_ += static_cast<int64_t>(from.size());
  seq_.truncate(static_cast<int32_t>(base + from.size()));
  cached_.insert(cached_.end(), context.begin() + static_cast<ptrdiff_t>(base),
                 context.begin() + static_cast<ptrdiff_t>(base + from.size()));
}

size_t ModelProposer::keep_common_prefix(std::span<const int32_t> context) {
  reclaim_tree(context);
  const size_t common = reusable_prefix(context);
  seq_.truncate(static_cast<int32_t>(common));
  cached_.resize(common);
  return common;
}

size_t ModelProposer::step_cache_bytes(std::span<const int32_t> context, int32_t chunk, int32_t draft_max) const {
  const size_t pending = prefill_pending(context);
  int32_t positions;
  if (pending > 0) {
    positions = seq_.length() + static_cast<int32_t>(std::min<size_t>(pending, static_cast<size_t>(std::max(chunk, 0))));
  } else {
    // The catch-up feeds the whole context, then draft_max - 1 drafts are fed for the next ones.
    positions = static_cast<int32_t>(context.size()) + draft_max - 1;
  }
  const int32_t have = static_cast<int32_t>(seq_.block_table().size());
  const int32_t extra = std::max(0, blocks_for(positions, seq_.cache().block_size()) - have);
  return static_cast<size_t>(extra) * seq_.cache().block_bytes();
}

void ModelProposer::prefill(std::span<DraftPrefillJob> jobs) {
  Transformer& draft = tf_;
  struct Fed {
    DraftPrefillJob* job;
    std::span<const int32_t> chunk;
    bool completes;  // the chunk is the rest of its prefill
  };
  Batch b;
  std::vector<Fed> fed;
  for (DraftPrefillJob& j : jobs) {
    j.fed = 0;
    j.kv_full = false;
    ModelProposer& p = static_cast<ModelProposer&>(*j.proposer);  // batch_key: all of them are ours
    if (j.context.size() < 2 || j.max_tokens == 0) continue;
    // Everything but the last token: propose() re-feeds that one to get fresh logits.
    const size_t common = p.keep_common_prefix(j.context);
    const auto todo = j.context.subspan(common, j.context.size() - 1 - common);
    if (todo.empty()) {
      p.prefilled_ = true;
      continue;
    }
    const auto chunk = todo.first(std::min(j.max_tokens, todo.size()));
    // Reserved lane by lane, so that a lane without room leaves the others their pass.
    if (!p.seq_.reserve(p.seq_.length() + static_cast<int32_t>(chunk.size()))) {
      j.kv_full = true;
      continue;
    }
    b.add(p.seq_, as_draft_tokens(chunk, draft.model().config().n_vocab), std::vector<bool>(chunk.size(), false));
    fed.push_back({&j, chunk, chunk.size() == todo.size()});
  }
  if (b.empty()) return;
  std::vector<float> logits;
  draft.forward(b, logits);
  for (const Fed& f : fed) {
    ModelProposer& p = static_cast<ModelProposer&>(*f.job->proposer);
    p.cached_.insert(p.cached_.end(), f.chunk.begin(), f.chunk.end());
    f.job->fed = f.chunk.size();
    if (f.completes) p.prefilled_ = true;
  }
}

// ---- drafting: one propose() call ------------------------------------------------------
//
// Each job is a lane. The lanes first catch up on their new context tokens (chunked passes,
// logits for the last token), then draft in lockstep: each active lane draws its next token
// from its latest logits (on the host, or on the device from DraftProbs), and one pass feeds
// every lane's new token for the next position.
class ModelProposer::Drafting {
 public:
  Drafting(Transformer& draft, std::span<ProposeJob> jobs) : draft_(draft), jobs_(jobs) {}

  void run() {
    if (!open_lanes()) return;
    try {
      catch_up();
      draft_positions();
      draft_trees();
    } catch (const KVCacheFull&) {
      // Not expected (every lane reserved its room first); if it happens anyway, every lane
      // keeps what it drafted so far (nothing of the failed pass was written).
      batch_.clear();
      for (Lane& l : lanes_) {
        ModelProposer& p = l.proposer();
        // A tree lane's cache holds fed nodes past its context: only the context stays.
        if (l.tree) p.seq_.truncate(static_cast<int32_t>(std::min(p.cached_.size(), static_cast<size_t>(p.seq_.length()))));
        p.cached_.resize(static_cast<size_t>(p.seq_.length()));
        if (l.tree) l.job->out = Proposal{};
      }
    }
  }

 private:
  struct Lane {
    ProposeJob* job;
    std::span<const int32_t> todo;  // catch-up tokens not yet fed
    std::vector<int32_t> history;   // context + drafted so far (for penalties)
    std::vector<float> logits;      // the draft's logits for the next token (a copy: the
                                    // batch's buffer is reused by the next pass)
    bool active = true;
    GrammarState grammar = {};      // constrained requests: the state after history
    bool device = false;            // samples on the device (DraftProbs): logits stay there
    DraftProbs::Drawn drawn{-1, 0.0f, -1};  // a device lane's draw from its latest logits
    std::unique_ptr<TreeBuilder> tree = nullptr;  // the lane drafts a token tree (ProposeOptions::tree)
    ModelProposer& proposer() const { return static_cast<ModelProposer&>(*job->proposer); }
  };

  // One lane per job that drafts. Requests verified on the device sample their drafts there
  // too (DraftProbs), so their logits never leave it (a reduced draft vocabulary's are spread
  // over the whole one there). False when no job drafts.
  bool open_lanes() {
    for (ProposeJob& j : jobs_)
      if (DraftProbs* d = static_cast<ModelProposer&>(*j.proposer).device_probs_) dev_ = d;
    const int64_t width_all = draft_.model().config().n_vocab;
    int64_t dev_cols = 0, all_rows = 0;
    for (ProposeJob& j : jobs_) {
      j.out = Proposal{};
      j.kv_full = false;
      if (j.context.empty() || j.opts.max_tokens <= 0 || !j.opts.sampling) continue;
      ModelProposer& p = static_cast<ModelProposer&>(*j.proposer);
      const size_t common = p.keep_common_prefix(j.context);
      Lane l{&j, j.context.subspan(common), std::vector<int32_t>(j.context.begin(), j.context.end()), {}};
      const int64_t cols = j.opts.vocab > 0 ? std::min<int64_t>(width_all, j.opts.vocab) : width_all;
      // Trees choose their nodes' children on the device (only the children come back; a
      // rejection-mode tree's q stays there for the verifier), constrained ones under their
      // nodes' masks.
      if (j.opts.tree()) {
        l.tree = std::make_unique<TreeBuilder>(j.context, j.opts, j.rng);
        l.device = dev_ && j.opts.on_device && cols <= kernels::kMaxDeviceSampleVocab &&
                   (!l.tree->sampled() || dev_cols == 0 || cols == dev_cols);
        // Store rows: a chain's draws take a row for this lane's catch-up row too; a
        // rejection-mode tree's q takes one for its root and one a fed node (at most its nodes).
        ++all_rows;
        if (l.device && l.tree->sampled()) {
          dev_cols = cols;
          all_rows += j.opts.tree_nodes + 1;
        }
        lanes_.push_back(std::move(l));
        continue;
      }
      if (j.opts.grammar && j.opts.grammar_state) l.grammar = *j.opts.grammar_state;
      if (dev_ && j.opts.on_device && cols <= kernels::kMaxDeviceSampleVocab &&
          (dev_cols == 0 || cols == dev_cols)) {
        l.device = true;
        dev_cols = cols;
      }
      all_rows += j.opts.max_tokens + 1;  // logits rows a lane may take: catch-up + one per draft
      lanes_.push_back(std::move(l));
    }
    // Every logits row of a pass with a device chain lane takes a row of the store (host
    // lanes' are skipped), so the store is sized for every lane.
    if (dev_cols > 0) dev_->begin_step(all_rows, dev_cols);
    return !lanes_.empty();
  }

  // Feeds every lane's new context tokens (chunked), logits for the last one.
  void catch_up() {
    for (bool more = true; more;) {
      more = false;
      std::vector<Lane*> out;
      for (Lane& l : lanes_) {
        if (l.todo.empty() || !l.active) continue;
        const auto chunk = l.todo.first(std::min(kChunk, l.todo.size()));
        if (!room(l, chunk.size())) continue;
        l.todo = l.todo.subspan(chunk.size());
        const bool last = l.todo.empty();
        std::vector<bool> want(chunk.size(), false);
        if (last) want.back() = true;
        ModelProposer& p = l.proposer();
        batch_.add(p.seq_, as_draft_tokens(chunk, draft_.model().config().n_vocab), want);
        p.cached_.insert(p.cached_.end(), chunk.begin(), chunk.end());
        ++p.forwards_;
        if (last) out.push_back(&l);
        more = more || !l.todo.empty();
      }
      if (!batch_.empty()) pass(out);
      for (Lane* l : out) l->proposer().prefilled_ = true;  // it has read the whole context
    }
  }

  // Draft positions in lockstep: each lane draws from its logits, then one pass for all.
  void draft_positions() {
    for (int32_t i = 0;; ++i) {
      std::vector<Lane*> out;
      for (Lane& l : lanes_) {
        if (!l.active || l.tree) continue;
        bool last = i + 1 >= l.job->opts.max_tokens;  // or the grammar is complete
        const int32_t tok = l.device ? draw_on_device(l, last) : draw_on_host(l, i, last);
        if (tok < 0) {
          l.active = false;
          continue;
        }
        l.history.push_back(tok);
        if (last) {
          l.active = false;
          continue;
        }
        const int32_t one[1] = {tok};
        if (!room(l, 1)) continue;
        ModelProposer& p = l.proposer();
        batch_.add(p.seq_, one);
        p.cached_.push_back(tok);
        ++p.forwards_;
        out.push_back(&l);
      }
      if (out.empty()) return;
      pass(out);
    }
  }

  // The tree lanes (draft/token_tree.hpp): the root's children from the catch-up's logits,
  // then one pass per depth feeding every lane's frontier (Batch::add_tree, the tree's nodes
  // after the context in feed order), each fed node expanded from its row. The fed nodes'
  // KV stays in the draft's cache for the next call to keep what the target accepted.
  void draft_trees() {
    std::vector<Lane*> tl;
    for (Lane& l : lanes_)
      if (l.tree && l.active) {
        if (!l.device) l.tree->expand(-1, l.logits);  // a device lane's root: expanded by pass()
        tl.push_back(&l);
      }
    if (tl.empty()) return;
    const int32_t vocab = draft_.model().config().n_vocab;
    for (;;) {
      std::vector<std::pair<Lane*, int32_t>> rows;
      for (Lane* l : tl) {
        // Room for a whole frontier first: take_frontier marks its nodes fed.
        if (!l->active || !room(*l, static_cast<size_t>(l->job->opts.tree_width))) continue;
        const std::vector<int32_t> f = l->tree->take_frontier();
        if (f.empty()) continue;
        std::vector<int32_t> toks, pos;
        std::vector<uint64_t> masks;
        for (int32_t n : f) {
          toks.push_back(l->tree->token(n));
          pos.push_back(l->tree->position(n));
          masks.push_back(l->tree->fed_mask(n));
          rows.push_back({l, n});
        }
        ModelProposer& p = l->proposer();
        batch_.add_tree(p.seq_, as_draft_tokens(toks, vocab), pos, static_cast<int32_t>(l->job->context.size()), masks);
        ++p.forwards_;
      }
      if (rows.empty()) break;
      const bool to_host = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return !r.first->device; });
      draft_.forward(batch_, logits_, to_host);
      batch_.clear();
      std::vector<std::pair<Lane*, int32_t>> on_device;
      std::vector<size_t> device_rows;
      std::vector<float> row;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].first->device) {
          on_device.push_back(rows[i]);
          device_rows.push_back(i);
          continue;
        }
        host_row(i, row);
        rows[i].first->tree->expand(rows[i].second, row);
      }
      expand_on_device(on_device, device_rows);
    }
    for (Lane* l : tl) {
      ModelProposer& p = l->proposer();
      // The fed nodes stay in the cache after the context (cached_) until the next call
      // keeps the ones the target accepted (reclaim_tree).
      p.fed_tree_ = l->tree->fed_nodes();
      p.seq_.truncate(static_cast<int32_t>(p.cached_.size() + p.fed_tree_.size()));
      l->job->out = l->tree->take();
      l->job->out.on_device = l->device && !l->job->out.tokens.empty();
    }
  }

  // Tree nodes (lane, node; -1: the root) expanded from rows `at` of the last pass's logits
  // on the device: each node's children chosen there (DraftProbs::tree_children). Every node
  // is begun before any gets its children, in order, as the host's expand would take them.
  void expand_on_device(const std::vector<std::pair<Lane*, int32_t>>& nodes, const std::vector<size_t>& at) {
    std::vector<DraftProbs::TreeRow> rows;
    std::vector<std::vector<int32_t>> histories;
    std::vector<std::pair<Lane*, int32_t>> wanting;
    std::vector<std::shared_ptr<const TokenMask>> masks;  // held until the children are chosen
    histories.reserve(nodes.size());
    const int64_t width = draft_.model().config().n_vocab;
    int64_t cols = width;
    for (size_t i = 0; i < nodes.size(); ++i) {
      Lane* l = nodes[i].first;
      const int32_t node = nodes[i].second;
      TreeBuilder& tb = *l->tree;
      const int32_t slot = tb.next_slot();
      const int32_t room = tb.begin_expand(node);
      if (room <= 0) continue;
      const ProposeOptions& o = l->job->opts;
      using Mode = DraftProbs::TreeMode;
      const Mode mode = o.sampling->greedy() ? Mode::Greedy : o.coupled ? Mode::Coupled : Mode::Drawn;
      histories.push_back(mode == Mode::Greedy ? std::vector<int32_t>{} : tb.history(node));
      DraftProbs::TreeRow r{static_cast<int32_t>(at[i]), room, o.sampling, histories.back(), mode,
                            mode == Mode::Coupled ? o.coupled->seed() : o.sampling->seed.value_or(0),
                            tb.children_position(node)};
      if (mode == Mode::Drawn) {
        r.tag = kernels::tree_draw_tag(tb.children_depth(node), slot);
        if (!o.tree_cost.empty())
          r.how_many = [&tb, node, room](std::span<const float> top) { return tb.children_to_draw(node, room, top); };
      }
      if (auto m = tb.children_mask(node)) {
        r.mask = *m;
        masks.push_back(std::move(m));
      }
      rows.push_back(std::move(r));
      wanting.push_back(nodes[i]);
      cols = o.vocab > 0 ? std::min<int64_t>(width, o.vocab) : width;  // one draft: the same for every lane
    }
    if (rows.empty()) return;
    const OutputSubset* subset = draft_.output_subset();
    const std::vector<DraftProbs::TreeChildren> kids =
        subset ? dev_->tree_children(draft_.device_logits(), rows, cols, &subset->ids_on_backend, width)
               : dev_->tree_children(draft_.device_logits(), rows, cols);
    for (size_t i = 0; i < wanting.size(); ++i)
      wanting[i].first->tree->add_children(wanting[i].second, kids[i].kids, kids[i].q_row);
  }

  // Row i of the last pass's logits over the draft's whole vocabulary (a reduced output head's
  // other tokens at -inf).
  void host_row(size_t i, std::vector<float>& dst) const {
    const OutputSubset* subset = draft_.output_subset();
    const size_t vocab = static_cast<size_t>(draft_.model().config().n_vocab);
    const size_t width = static_cast<size_t>(draft_.n_logits());
    const float* row = logits_.data() + i * width;
    if (!subset) {
      dst.assign(row, row + width);
      return;
    }
    dst.assign(vocab, -std::numeric_limits<float>::infinity());
    for (size_t j = 0; j < width; ++j) dst[static_cast<size_t>(subset->ids[j])] = row[j];
  }

  // A device lane's token, drawn on the device from its last pass (DraftProbs::sample): the
  // same decisions as on the host, from the same q. -1: the lane stops here (also when its
  // grammar allows nothing the draft can propose); `last` is set when a grammar completes.
  int32_t draw_on_device(Lane& l, bool& last) {
    const ProposeJob& j = *l.job;
    const int32_t tok = l.drawn.token;
    const float conf = j.opts.p_min <= 0.0f ? 1.0f : l.drawn.conf;
    if (tok < 0 || conf < j.opts.p_min) return -1;
    l.job->out.tokens.push_back(tok);
    l.job->out.on_device = true;
    if (!j.opts.sampling->greedy() && !j.opts.coupled) l.job->out.q_rows.push_back(l.drawn.q_row);
    advance_grammar(l, tok, last);
    return tok;
  }

  // A constrained lane past its drafted token: nothing follows a token that completes the
  // sentence or ends the generation.
  static void advance_grammar(Lane& l, int32_t tok, bool& last) {
    const TokenGrammar* grammar = l.job->opts.grammar_state ? l.job->opts.grammar : nullptr;
    if (!grammar) return;
    l.grammar = grammar->after(l.grammar, tok);
    last = last || TokenGrammar::complete(l.grammar) || grammar->vocab().is_eog(tok);
  }

  // A constrained lane's mask after its history (null: unconstrained).
  static std::shared_ptr<const TokenMask> lane_mask(const Lane& l) {
    const TokenGrammar* grammar = l.job->opts.grammar_state ? l.job->opts.grammar : nullptr;
    return grammar ? grammar->mask(l.grammar) : nullptr;
  }

  // A host lane's i-th draft from its logits; `last` is set when a grammar completes. -1:
  // the lane stops here.
  int32_t draw_on_host(Lane& l, int32_t i, bool& last) {
    const ProposeJob& j = *l.job;
    const SamplingParams& sp = *j.opts.sampling;
    const int64_t position = static_cast<int64_t>(j.context.size()) + i;
    // Only ids both models share: the draft's padding rows are no tokens of the target.
    const size_t shared =
        j.opts.vocab > 0 ? std::min(l.logits.size(), static_cast<size_t>(j.opts.vocab)) : l.logits.size();
    const auto logits = std::span<const float>(l.logits).first(shared);
    // A constrained draft proposes only what the grammar allows; q is over those tokens.
    const std::shared_ptr<const TokenMask> mask = lane_mask(l);
    Distribution d;
    try {
      d = mask ? make_distribution(logits, sp, l.history, *mask) : make_distribution(logits, sp, l.history);
    } catch (const std::runtime_error&) {
      if (!mask) throw;
      return -1;  // nothing the grammar allows is in the draft's vocabulary: stop drafting
    }
    // Whether to draft this position is decided from q alone, before its token is drawn: a
    // stop that looked at the drawn token would skew which tokens get verified. (Greedy:
    // the draft's softmax at temperature 1 over what the grammar allows.)
    const float conf = j.opts.p_min <= 0.0f ? 1.0f : sp.greedy() ? greedy_confidence(logits, mask.get()) : d.probs[0];
    if (conf < j.opts.p_min) return -1;
    const int32_t tok = sp.greedy()       ? d.ids[0]
                        : j.opts.coupled ? gumbel_argmax(d, *j.opts.coupled, position)
                                         : sample(d, *j.rng);
    l.job->out.tokens.push_back(tok);
    // A coupled draft is verified by equality, so q is not needed.
    if (!sp.greedy() && !j.opts.coupled) l.job->out.dists.push_back(std::move(d));
    advance_grammar(l, tok, last);
    return tok;
  }

  // Room in the draft cache for n more positions of a lane, reserved before the lane joins a
  // pass; without it the lane stops here (keeping what it drafted) and the others go on.
  static bool room(Lane& l, size_t n) {
    SequenceKV& seq = l.proposer().seq_;
    if (seq.reserve(seq.length() + static_cast<int32_t>(n))) return true;
    l.active = false;
    l.job->kv_full = true;
    return false;
  }

  // Runs the batch and points each listed lane at its row of logits (device lanes: at its
  // draw from them). With a reduced draft vocabulary (Transformer::output_subset) the other
  // tokens get -inf: q is then a proper distribution over the subset and 0 elsewhere, which
  // rejection sampling and the coupled verifier take exactly as they take any q (the
  // target's p is untouched).
  void pass(const std::vector<Lane*>& with_logits) {
    const OutputSubset* subset = draft_.output_subset();
    const bool to_host = std::any_of(with_logits.begin(), with_logits.end(), [](const Lane* l) { return !l->device; });
    draft_.forward(batch_, logits_, to_host);
    std::vector<DraftProbs::Lane> dl;
    std::vector<Lane*> dl_of;
    std::vector<std::pair<Lane*, int32_t>> roots;  // device tree lanes: their roots' children
    std::vector<size_t> root_rows;
    std::vector<std::shared_ptr<const TokenMask>> masks;  // held until the draws are done
    for (size_t i = 0; i < with_logits.size(); ++i) {
      Lane& l = *with_logits[i];
      if (!l.device) continue;
      if (l.tree) {
        roots.push_back({&l, -1});
        root_rows.push_back(i);
        continue;
      }
      const ProposeJob& j = *l.job;
      // (a run always carries its seed: SequenceRun settles it)
      dl.push_back({static_cast<int32_t>(i), j.opts.sampling, l.history, j.opts.coupled != nullptr,
                    j.opts.sampling->seed.value_or(0), static_cast<int64_t>(j.context.size() + j.out.tokens.size()),
                    static_cast<int32_t>(j.out.tokens.size())});
      if (auto m = lane_mask(l)) {
        dl.back().mask = *m;
        masks.push_back(std::move(m));
      }
      dl_of.push_back(&l);
    }
    if (!dl.empty()) {
      const std::vector<DraftProbs::Drawn> drawn =
          subset ? dev_->sample(draft_.device_logits(), dl, &subset->ids_on_backend, draft_.model().config().n_vocab)
                 : dev_->sample(draft_.device_logits(), dl);
      for (size_t i = 0; i < drawn.size(); ++i) dl_of[i]->drawn = drawn[i];
    }
    expand_on_device(roots, root_rows);
    for (size_t i = 0; i < with_logits.size(); ++i)
      if (!with_logits[i]->device) host_row(i, with_logits[i]->logits);
    batch_.clear();
  }

  Transformer& draft_;
  std::span<ProposeJob> jobs_;
  std::vector<Lane> lanes_;
  DraftProbs* dev_ = nullptr;
  Batch batch_;
  std::vector<float> logits_;
};

void ModelProposer::propose(std::span<ProposeJob> jobs) { Drafting(tf_, jobs).run(); }

}  // namespace tandem
