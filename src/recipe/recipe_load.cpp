#include <algorithm>
#include <charconv>
#include <climits>
#include <filesystem>
#include <fstream>

#include "model/hf_config.h"
#include "recipe/recipe_internal.h"
#include "util/error.h"
#include "util/json_file.h"

namespace llmrun {
namespace fs = std::filesystem;
using recipe_detail::Locator;
using recipe_detail::MapReader;

namespace {

// Upper bounds keep every derived product (ffn default, parameter counts) inside int64.
constexpr int64_t kMaxWidth = int64_t(1) << 20;
constexpr int64_t kMaxCount = int64_t(1) << 24;

YAML::Node parse_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UserError(path + ": is a directory, not a recipe file");
  if (!std::ifstream(path)) throw UserError(path + ": cannot read recipe file");
  try {
    // A second document after "---" would otherwise be dropped without a word.
    std::vector<YAML::Node> docs = YAML::LoadAllFromFile(path);
    if (docs.size() > 1) {
      throw UserError(path + ":" + std::to_string(docs[1].Mark().line + 1) +
                      ": a recipe is one YAML document, this file holds " +
                      std::to_string(docs.size()));
    }
    return docs.empty() ? YAML::Node() : docs[0];
  } catch (const YAML::ParserException& e) {
    throw UserError(recipe_detail::yaml_error(path, e));
  }
}

// Writes each "a.b=value" into the document before any check runs, so an override
// passes through exactly the validation a value in the file would.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, Locator& loc) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const std::string& o : overrides) {
    const std::string flag = "--set " + o;
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UserError(flag + ": expected KEY=VALUE, e.g. train.steps=100");
    }
    std::vector<std::string> parts;
    for (size_t start = 0; start <= eq;) {
      const size_t dot = std::min(o.find('.', start), eq);
      parts.push_back(o.substr(start, dot - start));
      start = dot + 1;
    }
    for (const std::string& p : parts) {
      if (p.empty()) throw UserError(flag + ": empty name in key path '" + o.substr(0, eq) + "'");
    }
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::ParserException& e) {
      throw UserError(flag + ": cannot parse the value: " + recipe_detail::yaml_error_text(e));
    }
    if (!root.IsMap()) throw UserError(flag + ": the recipe is not a mapping");
    YAML::Node cur;
    cur.reset(root);  // reset() rebinds; operator= would overwrite the node cur refers to
    std::string key;
    bool created = false;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string parent = key;
      key += (key.empty() ? "" : ".") + parts[i];
      YAML::Node next;
      if (cur.IsSequence()) {
        size_t idx = 0;
        const auto [ptr, ec] =
            std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), idx);
        if (ec != std::errc() || ptr != parts[i].data() + parts[i].size() || idx >= cur.size()) {
          throw UserError(flag + ": " + parent + ": a list of " + std::to_string(cur.size()) +
                          " items has no item '" + parts[i] + "'");
        }
        next.reset(cur[idx]);
      } else if (cur.IsMap() || cur.IsNull() || !cur.IsDefined()) {
        // The first key this flag creates is where its errors (e.g. unknown key) belong.
        if (!created && !static_cast<const YAML::Node&>(cur)[parts[i]]) {
          created = true;
          loc.add_override(key, flag);
        }
        next.reset(cur[parts[i]]);
      } else {
        throw UserError(flag + ": " + parent + ": holds the value " + recipe_detail::show(cur) +
                        ", it has no key '" + parts[i] + "'");
      }
      if (i + 1 == parts.size()) {
        next = value;
      } else {
        cur.reset(next);
      }
    }
    loc.add_override(key, flag);
  }
}

int to_int(std::optional<int64_t> v, int fallback) { return v ? int(*v) : fallback; }

template <class T>
T required(const MapReader& m, const std::string& k, std::optional<T> v, const Locator& loc) {
  if (!v) loc.fail(m.key(k), "missing (required)");
  return *v;
}

// Relative paths in the file are relative to the file; on the command line, to the cwd.
std::string resolve(const std::string& raw, const std::string& key, const fs::path& base,
                    const Locator& loc) {
  if (raw.empty()) return raw;
  fs::path p(raw);
  if (p.is_relative()) p = loc.override_for(key) ? fs::absolute(p) : base / p;
  p = p.lexically_normal();
  // "dir/." normalises to "dir/"; messages and comparisons want "dir".
  if (p.filename().empty() && p.has_relative_path()) p = p.parent_path();
  return p.string();
}

// model.from: the shape comes from the Hugging Face config.json; a field also written in
// the recipe must agree with it (a silent override would not match the weights).
void read_model_from(const MapReader& m, Locator& loc, const fs::path& base, Recipe& r,
                     std::optional<int64_t>& vocab) {
  r.model_from = resolve(*m.string("from"), "model.from", base, loc);
  std::error_code ec;
  if (!fs::is_directory(r.model_from, ec))
    loc.fail("model.from",
             r.model_from + " is not a directory (expected a Hugging Face model dir)");
  ModelConfig c;
  const std::string cfg = fs::path(r.model_from) / "config.json";
  bool quantized = false;
  try {
    c = load_model_config(r.model_from);
    quantized = read_json_file(cfg).contains("quantization_config");
  } catch (const UserError& e) {
    loc.fail("model.from", e.what());
  }
  // GPTQ/AWQ weights are packed integers with no fp32 tensors to train from.
  if (quantized)
    loc.fail("model.from", r.model_from +
                               " is a quantized model (config.json has a quantization_config): "
                               "training needs full-precision weights; `llmrun convert " +
                               r.model_from + " --to hf OUT` writes them");
  auto agree = [&](const char* key, const std::string& recipe_value,
                   const std::string& config_value) {
    if (recipe_value != config_value)
      loc.fail(std::string("model.") + key, recipe_value + " conflicts with " + config_value +
                                                " in " + cfg + " (model.from); drop the key");
  };
  if (m.has("arch")) agree("arch", *m.string("arch"), arch_name(c.arch));
  const std::pair<const char*, int> ints[] = {
      {"layers", c.layers}, {"d_model", c.d_model}, {"heads", c.heads},    {"kv_heads", c.kv_heads},
      {"ffn", c.ffn},       {"vocab", c.vocab},     {"seq_len", c.seq_len}};
  for (const auto& [key, v] : ints)
    if (m.has(key)) agree(key, std::to_string(*m.integer(key, 1, INT64_MAX)), std::to_string(v));
  if (m.has("rope_theta"))
    agree("rope_theta", std::to_string(float(*m.number("rope_theta"))),
          std::to_string(c.rope_theta));
  if (m.has("norm_eps"))
    agree("norm_eps", std::to_string(float(*m.number("norm_eps"))), std::to_string(c.norm_eps));
  if (m.has("tie_embeddings"))
    agree("tie_embeddings", *m.boolean("tie_embeddings") ? "true" : "false",
          c.tie_embeddings ? "true" : "false");
  if (m.has("qkv_bias"))
    agree("qkv_bias", *m.boolean("qkv_bias") ? "true" : "false", c.qkv_bias ? "true" : "false");
  r.model = c;
  read_moe(m, loc, r.model, /*from_hf=*/true);
  vocab = c.vocab;
}

void read_model(const YAML::Node& node, Locator& loc, const fs::path& base, Recipe& r,
                std::optional<int64_t>& vocab) {
  const MapReader m(node, "model", loc,
                    {"arch", "layers", "d_model", "heads", "kv_heads", "ffn", "vocab", "seq_len",
                     "rope_theta", "norm_eps", "tie_embeddings", "qkv_bias", "from", "moe"});
  if (m.has("from")) return read_model_from(m, loc, base, r, vocab);
  ModelConfig& c = r.model;
  const std::string arch = required(m, "arch", m.string("arch"), loc);
  if (arch != "gpt2" && arch != "llama")
    loc.fail("model.arch", "expected gpt2 or llama, got '" + arch + "'");
  c.arch = arch == "gpt2" ? Arch::gpt2 : Arch::llama;
  c.layers = int(required(m, "layers", m.integer("layers", 1, kMaxCount), loc));
  c.d_model = int(required(m, "d_model", m.integer("d_model", 1, kMaxWidth), loc));
  c.heads = int(required(m, "heads", m.integer("heads", 1, kMaxWidth), loc));
  c.seq_len = int(required(m, "seq_len", m.integer("seq_len", 2, kMaxCount), loc));
  c.kv_heads = to_int(m.integer("kv_heads", 1, kMaxWidth), c.heads);
  vocab = m.integer("vocab", 1, kMaxCount);
  c.norm_eps = float(m.number("norm_eps").value_or(1e-5));
  const std::optional<bool> tie = m.boolean("tie_embeddings");
  if (c.arch == Arch::gpt2) {
    if (c.kv_heads != c.heads) {
      loc.fail(
          "model.kv_heads",
          "GPT-2 has no grouped-query attention: must equal model.heads=" + std::to_string(c.heads),
          "model.heads");
    }
    if (m.has("rope_theta")) loc.fail("model.rope_theta", "GPT-2 uses learned positions, not RoPE");
    if (m.has("qkv_bias"))
      loc.fail("model.qkv_bias", "GPT-2 has biases on every linear layer already");
    if (tie == false) {
      loc.fail("model.tie_embeddings", "GPT-2 always ties the LM head to the token embedding");
    }
    c.ffn = to_int(m.integer("ffn", 1, kMaxCount), 4 * c.d_model);
    c.tie_embeddings = true;
  } else {
    // Llama's SwiGLU width: 2/3 of 4*d (same parameters as a 4*d GELU MLP), rounded up
    // to a multiple of 256 as Meta's reference code does.
    const int swiglu = (2 * 4 * c.d_model / 3 + 255) / 256 * 256;
    c.ffn = to_int(m.integer("ffn", 1, kMaxCount), swiglu);
    c.rope_theta = float(m.number("rope_theta").value_or(10000.0));
    c.tie_embeddings = tie.value_or(false);
    c.qkv_bias = m.boolean("qkv_bias").value_or(false);
  }
  read_moe(m, loc, c, /*from_hf=*/false);
}

// A list of sources (or one path) under `key` ("data.train" / "data.valid").
std::vector<DataSource> read_sources(const YAML::Node& list, const std::string& key, Locator& loc,
                                     const fs::path& base) {
  std::vector<YAML::Node> items;
  if (list.IsSequence()) {
    for (const YAML::Node& it : list) items.push_back(it);
    if (items.empty()) loc.fail(key, "needs at least one source");
  } else if (list.IsScalar()) {
    items.push_back(list);
  } else {
    loc.fail(key, "expected a path or a list of {path, weight}, got " + recipe_detail::show(list));
  }
  std::vector<DataSource> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string prefix = key + "." + std::to_string(i);
    // Every source is named KEY.N.path in messages, whichever form it was written in.
    const std::string path_key = prefix + ".path";
    DataSource src;
    if (items[i].IsScalar()) {
      loc.note(path_key, items[i].Mark());
      src.path = recipe_detail::read_string(items[i], path_key, loc);
    } else {
      loc.note(prefix, items[i].Mark());
      const MapReader s(items[i], prefix, loc, {"path", "weight"});
      src.path = required(s, "path", s.string("path"), loc);
      src.weight = s.number("weight").value_or(1.0);
    }
    if (src.path.empty()) loc.fail(path_key, "empty path");
    src.path = resolve(src.path, path_key, base, loc);
    out.push_back(src);
  }
  return out;
}

void read_data(const YAML::Node& node, Locator& loc, const fs::path& base, DataSection& d) {
  const MapReader m(node, "data", loc, {"tokenizer", "train", "valid"});
  // Keeps a tokenizer that model.from already chose unless the recipe names one.
  d.tokenizer = m.string("tokenizer").value_or(d.tokenizer);
  if (d.tokenizer != "byte" && m.has("tokenizer"))
    d.tokenizer = resolve(d.tokenizer, "data.tokenizer", base, loc);
  if (!m.has("train")) loc.fail("data.train", "missing (required): a file or directory of text");
  d.train = read_sources(m.node("train"), "data.train", loc, base);
  if (m.has("valid")) d.valid = read_sources(m.node("valid"), "data.valid", loc, base);
}

void read_train(const YAML::Node& node, Locator& loc, TrainSection& t) {
  const MapReader m(node, "train", loc,
                    {"steps", "micro_batch", "global_batch", "lr", "min_lr", "warmup", "schedule",
                     "weight_decay", "betas", "eps", "clip", "seed", "eval_every", "eval_batches"});
  t.steps = m.integer("steps", 1, INT64_MAX).value_or(t.steps);
  t.micro_batch = to_int(m.integer("micro_batch", 1, kMaxCount), t.micro_batch);
  t.global_batch = to_int(m.integer("global_batch", 1, kMaxCount), t.micro_batch);
  t.lr = m.number("lr").value_or(t.lr);
  // A tenth of the peak (Chinchilla's choice) keeps min_lr <= lr whatever lr is set to.
  t.min_lr = m.number("min_lr").value_or(t.lr / 10);
  t.warmup = m.integer("warmup", 0, INT64_MAX).value_or(t.warmup);
  if (const std::optional<std::string> name = m.string("schedule")) {
    const std::optional<LrDecay> decay = lr_decay_from_name(*name);
    if (!decay)
      loc.fail("train.schedule", "expected cosine, linear or constant, got '" + *name + "'");
    t.schedule = *decay;
  }
  t.weight_decay = m.number("weight_decay").value_or(t.weight_decay);
  if (m.has("betas")) {
    const YAML::Node b = m.node("betas");
    if (!b.IsSequence() || b.size() != 2) {
      loc.fail("train.betas",
               "expected a list of two numbers [beta1, beta2], got " +
                   (b.IsSequence() ? std::to_string(b.size()) + " items" : recipe_detail::show(b)));
    }
    loc.note("train.betas.0", b[0].Mark());
    loc.note("train.betas.1", b[1].Mark());
    t.beta1 = recipe_detail::read_number(b[0], "train.betas.0", loc);
    t.beta2 = recipe_detail::read_number(b[1], "train.betas.1", loc);
  }
  t.eps = m.number("eps").value_or(t.eps);
  t.clip = m.number("clip").value_or(t.clip);
  t.seed = uint64_t(m.integer("seed", 0, INT64_MAX).value_or(int64_t(t.seed)));
  t.eval_every = m.integer("eval_every", 0, INT64_MAX).value_or(t.eval_every);
  t.eval_batches = to_int(m.integer("eval_batches", 1, kMaxCount), t.eval_batches);
}

void read_rest(const MapReader& top, Locator& loc, const fs::path& base, Recipe& r) {
  const MapReader p(top.node("precision"), "precision", loc, {"compute", "fp8"});
  r.precision.compute = p.string("compute").value_or("fp32");
  recipe_detail::read_fp8(p, loc, r.precision.fp8);
  if (r.precision.compute != "fp32" && r.precision.compute != "bf16")
    loc.fail("precision.compute", "'" + r.precision.compute + "' is not one of fp32, bf16");
  const MapReader c(top.node("checkpoint"), "checkpoint", loc,
                    {"dir", "every", "keep", "resume", "async"});
  r.checkpoint.dir = resolve(c.string("dir", true).value_or(""), "checkpoint.dir", base, loc);
  r.checkpoint.every = c.integer("every", 0, INT64_MAX).value_or(r.checkpoint.every);
  r.checkpoint.keep = to_int(c.integer("keep", 0, INT_MAX), r.checkpoint.keep);
  r.checkpoint.resume = c.string("resume").value_or(r.checkpoint.resume);
  if (r.checkpoint.resume != "auto" && r.checkpoint.resume != "never")
    r.checkpoint.resume = resolve(r.checkpoint.resume, "checkpoint.resume", base, loc);
  r.checkpoint.async = c.boolean("async").value_or(r.checkpoint.async);
  for (const char* key : {"every", "resume", "async"}) {
    if (c.has(key) && r.checkpoint.dir.empty() &&
        (std::string(key) != "resume" || r.checkpoint.resume == "auto"))
      loc.fail(std::string("checkpoint.") + key,
               "needs checkpoint.dir (where checkpoints are written)");
  }
  const MapReader l(top.node("logging"), "logging", loc, {"every", "metrics", "tensorboard"});
  r.logging.every = to_int(l.integer("every", 1, INT_MAX), r.logging.every);
  r.logging.metrics = resolve(l.string("metrics", true).value_or(""), "logging.metrics", base, loc);
  // logging.tensorboard: a directory, or true for checkpoint.dir/tb.
  bool tb_on = false;
  const bool tb_bool = l.has("tensorboard") && l.node("tensorboard").IsScalar() &&
                       YAML::convert<bool>::decode(l.node("tensorboard"), tb_on);
  if (tb_bool) {
    if (tb_on && r.checkpoint.dir.empty())
      loc.fail("logging.tensorboard", "true needs checkpoint.dir (events go to checkpoint.dir/tb)");
    r.logging.tensorboard = tb_on ? r.checkpoint.dir + "/tb" : "";
  } else {
    r.logging.tensorboard =
        resolve(l.string("tensorboard", true).value_or(""), "logging.tensorboard", base, loc);
  }
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root = parse_file(path);
  Locator loc(path);
  apply_overrides(root, overrides, loc);
  const MapReader top(root, "", loc,
                      {"model", "data", "train", "precision", "checkpoint", "logging", "parallel",
                       "launch", "memory", "finetune"});
  if (!top.has("model")) loc.fail("model", "missing (required)");
  if (!top.has("data")) loc.fail("data", "missing (required)");
  Recipe r;
  r.source = path;
  const fs::path base = fs::absolute(path).parent_path();
  std::optional<int64_t> vocab;
  read_model(top.node("model"), loc, base, r, vocab);
  // A model dir brings its tokenizer; the byte default would not match its vocabulary.
  if (!r.model_from.empty() && fs::exists(fs::path(r.model_from) / "tokenizer.json"))
    r.data.tokenizer = (fs::path(r.model_from) / "tokenizer.json").string();
  read_data(top.node("data"), loc, base, r.data);
  if (!vocab && r.data.tokenizer != "byte") {
    loc.fail("model.vocab", "missing (required unless data.tokenizer is byte)");
  }
  r.model.vocab = int(vocab.value_or(256));
  read_train(top.node("train"), loc, r.train);
  read_rest(top, loc, base, r);
  recipe_detail::read_parallel(top, loc, base, r);
  recipe_detail::read_finetune(top, loc, base, r);
  recipe_detail::validate_recipe(r, loc);
  return r;
}

}  // namespace llmrun
