// The speculative decoding options and their checks (see the header).
#include "cli/speculative_option.h"

#include "util/error.h"

namespace llmrun::cli {

void add_speculative_options(CLI::App* app, SpeculativeOptions& o) {
  app->add_option("--speculative", o.method,
                  "Speculative decoding: ngram (prompt lookup), draft (--draft-model) or none")
      ->capture_default_str();
  app->add_option("--num-speculative-tokens", o.num_tokens,
                  "Tokens proposed per step and sequence at most")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--ngram-min", o.ngram_min, "Shortest n-gram prompt lookup matches")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--ngram-max", o.ngram_max, "Longest n-gram prompt lookup matches")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app->add_option("--draft-model", o.draft_model_dir,
                  "Draft model directory for --speculative draft (same tokenizer)");
  app->add_option("--speculative-disable-by-batch-size", o.disable_by_batch_size,
                  "Propose nothing while this many sequences run (0: never stop)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_flag("--no-speculative-backoff", o.no_backoff,
                "Propose --num-speculative-tokens at every step, whether or not it pays");
}

namespace {
// Why two tokenizers differ, or empty when every id decodes to the same bytes.
std::string tokenizer_difference(const Tokenizer& a, const Tokenizer& b) {
  if (a.vocab_size() != b.vocab_size())
    return "the draft's tokenizer has " + std::to_string(b.vocab_size()) +
           " tokens, the target's " + std::to_string(a.vocab_size());
  if (a.eos_id() != b.eos_id())
    return "the end token differs (" + std::to_string(b.eos_id()) + " vs " +
           std::to_string(a.eos_id()) + ")";
  for (int32_t id = 0; id < a.vocab_size(); ++id)
    if (a.token_bytes(id) != b.token_bytes(id))
      return "token " + std::to_string(id) + " differs between the two tokenizers";
  return "";
}
}  // namespace

SpeculativeConfig make_speculative_config(const SpeculativeOptions& o, const LoadedModel& target,
                                          Backend& backend, LoadedModel& draft) {
  SpeculativeConfig c;
  c.method = parse_spec_method(o.method);
  c.num_tokens = o.num_tokens;
  c.ngram.ngram_min = o.ngram_min;
  c.ngram.ngram_max = o.ngram_max;
  c.disable_by_batch_size = o.disable_by_batch_size;
  c.adaptive = !o.no_backoff;
  if (o.ngram_min > o.ngram_max)
    throw UserError("--ngram-min " + std::to_string(o.ngram_min) + " exceeds --ngram-max " +
                    std::to_string(o.ngram_max));
  if (c.method == SpecMethod::draft) {
    if (o.draft_model_dir.empty()) throw UserError("--speculative draft needs --draft-model DIR");
    draft = load_model_dir(o.draft_model_dir, backend);
    const std::string why = tokenizer_difference(*target.tokenizer, *draft.tokenizer);
    if (!why.empty())
      throw UserError("--draft-model " + o.draft_model_dir +
                      " cannot draft for this model: " + why);
    if (draft.model->config().vocab != target.model->config().vocab)
      throw UserError("--draft-model " + o.draft_model_dir + " cannot draft for this model: its " +
                      "vocabulary has " + std::to_string(draft.model->config().vocab) +
                      " rows, the target's " + std::to_string(target.model->config().vocab));
    c.draft_model = draft.model.get();
  } else if (!o.draft_model_dir.empty()) {
    throw UserError("--draft-model needs --speculative draft");
  }
  return c;
}

}  // namespace llmrun::cli
