// DraftProposer: the draft model's KV bookkeeping and its batched drafting passes.
#include "serve/speculative/draft_proposer.h"

#include <algorithm>

#include "serve/logit_processors.h"
#include "util/error.h"

namespace llmrun {

namespace {
int pool_blocks(const DraftLimits& l) {
  // Every sequence at full length: drafting never has to preempt.
  return l.max_num_seqs * ((l.max_model_len + l.block_size - 1) / l.block_size + 1);
}
}  // namespace

DraftProposer::DraftProposer(Transformer& draft, const DraftLimits& limits)
    : model_(draft), lim_(limits), kv_(pool_blocks(limits), limits.block_size, false) {
  const ModelConfig& mc = model_.config();
  if (mc.arch == Arch::gpt2 && mc.seq_len < lim_.max_model_len)
    throw UserError("--draft-model: its context of " + std::to_string(mc.seq_len) +
                    " positions is shorter than --max-model-len " +
                    std::to_string(lim_.max_model_len));
  ModelRunnerLimits rl;
  rl.max_batched_tokens = lim_.max_batched_tokens;
  rl.max_num_seqs = lim_.max_num_seqs;
  rl.max_model_len = lim_.max_model_len;
  rl.block_size = lim_.block_size;
  rl.num_blocks = kv_.num_blocks();
  runner_ = std::make_unique<ModelRunner>(model_, rl, lim_.sample_vocab);
}

void DraftProposer::release(Sequence& s) {
  kv_.release(s.spec.draft_kv);
  s.spec.draft_history.clear();
}

void DraftProposer::propose(const std::vector<Sequence*>& seqs, const std::vector<int>& want,
                            const std::vector<ProposalGrammar*>& grammars) {
  const int V = model_.config().vocab, bs = lim_.block_size;
  struct Work {
    Sequence* s;
    int want;
    ProposalGrammar* grammar;
  };
  std::vector<Work> work;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    SpecState& st = s.spec;
    st.draft.clear();
    st.draft_probs.clear();
    if (want[i] <= 0) continue;
    // Keep the draft's k/v of the longest prefix it shares with the sequence (a verification
    // rejects part of the last proposal; a preemption changes nothing here), and always rerun
    // the last token: its logits draft the first token.
    const size_t L = s.tokens.size();
    size_t keep = 0;
    while (keep < st.draft_history.size() && keep + 1 < L &&
           st.draft_history[keep] == s.tokens[keep])
      ++keep;
    st.draft_history.resize(keep);
    kv_.trim(st.draft_kv, static_cast<int>(keep));
    if (!kv_.ensure(st.draft_kv, static_cast<int>(L) + want[i] - 1)) continue;
    work.push_back({&s, want[i], i < grammars.size() ? grammars[i] : nullptr});
  }
  // Passes: each runs, for every sequence still drafting, its tokens not yet in the draft's
  // cache (a whole catch-up the first time, then the one token drafted last), within the
  // step budget; a sequence that ran all of them samples its next draft token.
  std::vector<float> row, masked, processed;
  std::vector<double> q;
  for (;;) {
    BatchInput in;
    std::vector<Work*> rows;
    int budget = lim_.max_batched_tokens;
    std::vector<std::pair<Sequence*, int>> ran;  // tokens each sequence ran this pass
    for (Work& w : work) {
      SpecState& st = w.s->spec;
      if (static_cast<int>(st.draft.size()) >= w.want || budget <= 0) continue;
      // The tokens the draft has not seen: the sequence's, then its drafts so far.
      std::vector<int32_t> seen_all(w.s->tokens);
      seen_all.insert(seen_all.end(), st.draft.begin(), st.draft.end());
      const int start = static_cast<int>(st.draft_history.size());
      const int pending = static_cast<int>(seen_all.size()) - start;
      const int n = std::min(pending, budget);
      budget -= n;
      in.max_blocks = std::max(in.max_blocks, static_cast<int>(st.draft_kv.blocks.size()));
      const int s_idx = static_cast<int>(in.context_lens.size());
      if (in.query_starts.empty()) in.query_starts.push_back(0);
      for (int p = start; p < start + n; ++p) {
        in.tokens.push_back(seen_all[size_t(p)]);
        in.positions.push_back(p);
        in.slots.push_back(st.draft_kv.blocks[size_t(p / bs)] * bs + p % bs);
      }
      in.query_starts.push_back(in.query_starts.back() + n);
      in.context_lens.push_back(start + n);
      ran.emplace_back(w.s, n);
      if (n == pending) {
        in.logit_rows.push_back(in.query_starts[size_t(s_idx) + 1] - 1);
        rows.push_back(&w);
      }
    }
    if (in.tokens.empty()) break;
    const int S = static_cast<int>(in.context_lens.size());
    in.block_tables.assign(size_t(S) * in.max_blocks, 0);
    for (int s = 0; s < S; ++s) {
      const SeqBlocks& b = ran[size_t(s)].first->spec.draft_kv;
      std::copy(b.blocks.begin(), b.blocks.end(),
                in.block_tables.begin() + size_t(s) * in.max_blocks);
    }
    runner_->execute(in);
    for (auto& [s, n] : ran) {
      std::vector<int32_t>& h = s->spec.draft_history;
      const size_t start = h.size(), L = s->tokens.size();
      for (size_t p = start; p < start + size_t(n); ++p)
        h.push_back(p < L ? s->tokens[p] : s->spec.draft[p - L]);
    }
    bool any_greedy = false;
    for (Work* w : rows) any_greedy = any_greedy || !needs_distribution(w->s->params);
    const std::vector<int32_t> greedy =
        any_greedy ? runner_->argmax_rows() : std::vector<int32_t>();
    for (size_t r = 0; r < rows.size(); ++r) {
      Sequence& s = *rows[r]->s;
      ProposalGrammar* grammar = rows[r]->grammar;
      if (!needs_distribution(s.params)) {
        s.spec.draft.push_back(greedy[r]);
        continue;
      }
      row.resize(size_t(V));
      runner_->copy_row(static_cast<int>(r), row.data());
      // The same transforms the target applies at this position: penalties see the drafts.
      std::vector<int32_t> context(s.tokens);
      context.insert(context.end(), s.spec.draft.begin(), s.spec.draft.end());
      const float* raw = nullptr;
      const float* use = apply_logit_processors(s.params, context, s.prompt_len, row.data(), V,
                                                lim_.sample_vocab, masked, processed, raw);
      if (grammar) {
        // q masked as the target's row will be at this position: the token is drawn from it.
        if (use != processed.data()) processed.assign(use, use + V);
        use = processed.data();
        if (!grammar->mask(processed.data(), V)) {
          rows[r]->want = static_cast<int>(s.spec.draft.size());
          continue;
        }
      }
      s.sampler->distribution(use, V, q);
      const int32_t token = s.sampler->draw(q);
      s.spec.draft.push_back(token);
      s.spec.draft_probs.push_back(q);
      if (grammar) {
        LLMRUN_CHECK(grammar->take(token), "a draft token outside the grammar's mask");
        if (grammar->ended()) rows[r]->want = static_cast<int>(s.spec.draft.size());
      }
    }
  }
}

}  // namespace llmrun
