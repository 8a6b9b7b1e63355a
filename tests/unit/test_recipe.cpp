#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "util/error.h"

using namespace llmrun;
namespace fs = std::filesystem;

namespace {

// Each test gets its own fresh directory holding the recipe and its data.
class RecipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "llmrun-recipe-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
    write("data.txt", "hello world\n");
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  // Writes r.yaml and loads it, returning the UserError message ("" when it loaded).
  std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
    const std::string path = write("r.yaml", yaml);
    try {
      load_recipe(path, sets);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }

  std::string at(int line, int col) const {
    return (dir / "r.yaml").string() + ":" + std::to_string(line) + ":" + std::to_string(col) +
           ": ";
  }

  fs::path dir;
};

// Line numbers below are 1-based positions in this text.
const std::string kGpt2 =
    "model:\n"              // 1
    "  arch: gpt2\n"        // 2
    "  layers: 2\n"         // 3
    "  d_model: 64\n"       // 4
    "  heads: 4\n"          // 5
    "  seq_len: 32\n"       // 6
    "data:\n"               // 7
    "  train: data.txt\n";  // 8

#define EXPECT_HAS(haystack, needle)                    \
  EXPECT_NE((haystack).find(needle), std::string::npos) \
      << "message: " << (haystack) << "\nexpected to contain: " << (needle)

TEST_F(RecipeTest, MinimalGpt2LoadsWithDefaults) {
  const Recipe r = load_recipe(write("r.yaml", kGpt2));
  EXPECT_EQ(r.model.arch, Arch::gpt2);
  EXPECT_EQ(r.model.kv_heads, 4);
  EXPECT_EQ(r.model.ffn, 256);
  EXPECT_EQ(r.model.vocab, 256);
  EXPECT_TRUE(r.model.tie_embeddings);
  EXPECT_FLOAT_EQ(r.model.norm_eps, 1e-5f);
  EXPECT_EQ(r.data.tokenizer, "byte");
  ASSERT_EQ(r.data.train.size(), 1u);
  EXPECT_EQ(r.data.train[0].path, (dir / "data.txt").string());
  EXPECT_EQ(r.data.train[0].weight, 1.0);
  EXPECT_EQ(r.train.global_batch, r.train.micro_batch);
  EXPECT_DOUBLE_EQ(r.train.min_lr, r.train.lr / 10);
  EXPECT_EQ(r.train.schedule, LrDecay::cosine);
  EXPECT_EQ(r.precision.compute, "fp32");
  EXPECT_EQ(r.launch.backend, "auto");
  EXPECT_EQ(r.checkpoint.dir, "");
  EXPECT_EQ(r.logging.every, 1);
  EXPECT_EQ(r.grad_accum_steps(), 1);
}

TEST_F(RecipeTest, LlamaDefaults) {
  const Recipe r = load_recipe(write("r.yaml",
                                     "model: {arch: llama, layers: 2, d_model: 256, heads: 8, "
                                     "seq_len: 64}\n"
                                     "data: {train: [{path: data.txt, weight: 2}]}\n"));
  EXPECT_EQ(r.model.arch, Arch::llama);
  EXPECT_EQ(r.model.kv_heads, 8);
  EXPECT_EQ(r.model.ffn, 768);  // 2/3 * 4 * 256 = 682, rounded up to 256
  EXPECT_FALSE(r.model.tie_embeddings);
  EXPECT_FLOAT_EQ(r.model.rope_theta, 10000.0f);
  EXPECT_EQ(r.data.train[0].weight, 2.0);
}

TEST_F(RecipeTest, FullRecipeReadsEveryField) {
  const Recipe r =
      load_recipe(write("r.yaml", kGpt2 + "train: {steps: 50, micro_batch: 2, global_batch: 8, "
                                          "lr: 1e-3, min_lr: 0, warmup: 5, schedule: linear, "
                                          "weight_decay: 0, betas: [0.8, 0.99], eps: 1e-6, "
                                          "clip: 0, seed: 7}\n"
                                          "precision: {compute: fp32}\n"
                                          "checkpoint: {dir: out}\n"
                                          "logging: {every: 5, metrics: out/m.jsonl}\n"));
  EXPECT_EQ(r.train.steps, 50);
  EXPECT_EQ(r.grad_accum_steps(), 4);
  EXPECT_EQ(r.tokens_per_step(), 8 * 32);
  EXPECT_DOUBLE_EQ(r.train.lr, 1e-3);
  EXPECT_EQ(r.train.min_lr, 0.0);
  EXPECT_EQ(r.train.schedule, LrDecay::linear);
  EXPECT_DOUBLE_EQ(r.train.beta1, 0.8);
  EXPECT_DOUBLE_EQ(r.train.beta2, 0.99);
  EXPECT_EQ(r.train.seed, 7u);
  EXPECT_EQ(r.checkpoint.dir, (dir / "out").string());
  EXPECT_EQ(r.logging.metrics, (dir / "out/m.jsonl").string());
  EXPECT_EQ(r.logging.every, 5);
}

TEST_F(RecipeTest, RelativePathsResolveAgainstTheRecipeDirectory) {
  write("corpus/a.txt", "a");
  const std::string path =
      write("sub/r.yaml",
            "model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
            "data: {train: [../corpus, ../data.txt]}\n"
            "checkpoint: {dir: ../runs/x}\n");
  const Recipe r = load_recipe(path);
  ASSERT_EQ(r.data.train.size(), 2u);
  EXPECT_EQ(r.data.train[0].path, (dir / "corpus").string());
  EXPECT_EQ(r.data.train[1].path, (dir / "data.txt").string());
  EXPECT_EQ(r.checkpoint.dir, (dir / "runs/x").string());
  EXPECT_FALSE(fs::exists(dir / "runs")) << "loading must not create anything";
}

TEST_F(RecipeTest, SetPathsResolveAgainstTheWorkingDirectory) {
  const std::string path = write("sub/r.yaml", kGpt2);
  const fs::path old = fs::current_path();
  fs::current_path(dir);
  Recipe r;
  EXPECT_NO_THROW(r = load_recipe(path, {"data.train=data.txt"}));
  fs::current_path(old);
  ASSERT_EQ(r.data.train.size(), 1u);
  EXPECT_EQ(r.data.train[0].path, (dir / "data.txt").string());
}

TEST_F(RecipeTest, MalformedYamlPointsAtTheLine) {
  const std::string e = error_of("model:\n  arch: gpt2\n  layers: [1, 2\ndata: x\n");
  EXPECT_HAS(e, (dir / "r.yaml").string() + ":4:");
  EXPECT_HAS(e, "end of sequence");
}

TEST_F(RecipeTest, SecondDocumentIsRejected) {
  EXPECT_HAS(error_of(kGpt2 + "---\ntrain: {steps: 5}\n"), "a recipe is one YAML document");
}

TEST_F(RecipeTest, UnreadableFile) {
  try {
    load_recipe((dir / "nope.yaml").string());
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_HAS(std::string(e.what()), "nope.yaml: cannot read recipe file");
  }
}

TEST_F(RecipeTest, UnknownTopLevelKey) {
  const std::string e = error_of(kGpt2 + "trian:\n  steps: 3\n");
  EXPECT_HAS(e, at(9, 1) +
                    "trian: unknown key (expected one of: model, data, train, precision, "
                    "checkpoint, logging, parallel, launch, memory");
}

TEST_F(RecipeTest, UnknownNestedKey) {
  const std::string e = error_of(kGpt2 + "train:\n  steps: 3\n  lr_max: 1\n");
  EXPECT_HAS(e, at(11, 3) + "train.lr_max: unknown key (expected one of: steps, micro_batch,");
  const std::string e2 = error_of(
      "model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: "
      "8}\ndata: {train: [{path: data.txt, wieght: 1}]}\n");
  EXPECT_HAS(e2, at(2, 33) + "data.train.0.wieght: unknown key (expected one of: path, weight)");
}

TEST_F(RecipeTest, DuplicateKey) {
  EXPECT_HAS(error_of(kGpt2 + "train: {steps: 3, steps: 4}\n"),
             at(9, 19) + "train.steps: duplicate key");
}

TEST_F(RecipeTest, WrongTypes) {
  EXPECT_HAS(error_of(kGpt2 + "train:\n  steps: abc\n"),
             at(10, 10) + "train.steps: expected an integer, got 'abc'");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  lr: fast\n"),
             at(10, 7) + "train.lr: expected a number, got 'fast'");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  steps: 1.5\n"),
             "train.steps: expected an integer, got '1.5'");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  lr: nan\n"), "train.lr: expected a finite number");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  steps: [1]\n"),
             "train.steps: expected an integer, got a list");
  EXPECT_HAS(error_of(kGpt2 + "train: 5\n"), at(9, 8) + "train: expected a mapping, got '5'");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  betas: [0.9]\n"),
             "train.betas: expected a list of two numbers [beta1, beta2], got 1 items");
  EXPECT_HAS(
      error_of("model:\n  arch: gpt2\n  layers: 2\n  d_model: 64\n  heads: 4\n  seq_len: 32\n"
               "  tie_embeddings: maybe\ndata: {train: data.txt}\n"),
      at(7, 19) + "model.tie_embeddings: expected true or false, got 'maybe'");
  EXPECT_HAS(error_of("- a\n- b\n"), at(1, 1) + "expected a mapping, got a list");
}

TEST_F(RecipeTest, MissingRequiredParts) {
  EXPECT_HAS(error_of("data: {train: data.txt}\n"), "model: missing (required)");
  EXPECT_HAS(error_of(""), "model: missing (required)");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\ndata: {}\n"),
      at(2, 7) + "data.train: missing (required)");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 1, heads: 2, seq_len: 8}\ndata: {train: data.txt}\n"),
      at(1, 8) + "model.d_model: missing (required)");
  EXPECT_HAS(error_of("model: {arch: gpt3, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
                      "data: {train: data.txt}\n"),
             at(1, 15) + "model.arch: expected gpt2 or llama, got 'gpt3'");
}

TEST_F(RecipeTest, ModelShapeChecks) {
  const std::string shape = "  arch: gpt2\n  layers: 2\n  seq_len: 32\n";
  EXPECT_HAS(
      error_of("model:\n" + shape + "  d_model: 100\n  heads: 12\ndata: {train: data.txt}\n"),
      at(6, 10) + "model.heads: 12 does not divide model.d_model=100");
  EXPECT_HAS(error_of("model:\n" + shape + "  d_model: 64\n  heads: 0\ndata: {train: data.txt}\n"),
             at(6, 10) + "model.heads: must be >= 1, got 0");
  EXPECT_HAS(
      error_of("model: {arch: llama, layers: 2, seq_len: 32, d_model: 64, heads: 8, kv_heads: 3}\n"
               "data: {train: data.txt}\n"),
      "model.kv_heads: 3 does not divide model.heads=8");
  EXPECT_HAS(error_of("model: {arch: llama, layers: 2, seq_len: 32, d_model: 60, heads: 4}\n"
                      "data: {train: data.txt}\n"),
             "model.heads: head dimension d_model/heads=15 must be even");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 2, seq_len: 32, d_model: 64, heads: 4, kv_heads: 2}\n"
               "data: {train: data.txt}\n"),
      "model.kv_heads: GPT-2 has no grouped-query attention");
  EXPECT_HAS(error_of("model: {arch: gpt2, layers: 2, seq_len: 32, d_model: 64, heads: 4, "
                      "tie_embeddings: false}\ndata: {train: data.txt}\n"),
             "model.tie_embeddings: GPT-2 always ties");
  EXPECT_HAS(error_of("model: {arch: gpt2, layers: 2, seq_len: 1, d_model: 64, heads: 4}\n"
                      "data: {train: data.txt}\n"),
             "model.seq_len: must be >= 2, got 1");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 2, seq_len: 8, d_model: 64, heads: 4, vocab: 100}\n"
               "data: {train: data.txt}\n"),
      "model.vocab: 100 is too small for the byte tokenizer (256 tokens)");
}

TEST_F(RecipeTest, LargeVocabWithByteTokenizerIsAllowed) {
  EXPECT_EQ(
      error_of("model: {arch: gpt2, layers: 1, seq_len: 8, d_model: 8, heads: 2, vocab: 50257}\n"
               "data: {train: data.txt}\n"),
      "");
}

TEST_F(RecipeTest, TrainRangeChecks) {
  EXPECT_HAS(error_of(kGpt2 + "train: {micro_batch: 3, global_batch: 8}\n"),
             "train.global_batch: 8 is not a multiple of train.micro_batch=3");
  EXPECT_HAS(error_of(kGpt2 + "train: {lr: 0}\n"), "train.lr: must be > 0, got 0");
  EXPECT_HAS(error_of(kGpt2 + "train: {lr: 1e-3, min_lr: 1e-2}\n"),
             "train.min_lr: 0.01 is above the peak train.lr=0.001");
  EXPECT_HAS(error_of(kGpt2 + "train: {steps: 10, warmup: 11}\n"),
             "train.warmup: 11 is more than train.steps=10");
  EXPECT_HAS(error_of(kGpt2 + "train: {schedule: step}\n"),
             "train.schedule: expected cosine, linear or constant, got 'step'");
  EXPECT_HAS(error_of(kGpt2 + "train: {weight_decay: -1}\n"), "train.weight_decay: must be >= 0");
  EXPECT_HAS(error_of(kGpt2 + "train:\n  betas: [0.9, 1.0]\n"),
             at(10, 16) + "train.betas.1: must be in [0, 1), got 1");
  EXPECT_HAS(error_of(kGpt2 + "train: {eps: 0}\n"), "train.eps: must be > 0");
  EXPECT_HAS(error_of(kGpt2 + "train: {clip: -1}\n"), "train.clip: must be >= 0");
  EXPECT_HAS(error_of(kGpt2 + "train: {seed: -1}\n"), "train.seed: must be >= 0, got -1");
  EXPECT_HAS(error_of(kGpt2 + "logging: {every: 0}\n"), "logging.every: must be >= 1, got 0");
  EXPECT_HAS(error_of(kGpt2 + "train: {steps: 99999999999999999999}\n"),
             "train.steps: '99999999999999999999' is out of range");
}

TEST_F(RecipeTest, MissingDataFileNamesPathAndKey) {
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
               "data:\n  train:\n    - data.txt\n    - {path: missing.txt}\n"),
      at(5, 14) + "data.train.1.path: " + (dir / "missing.txt").string() + " does not exist");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
               "data:\n  train: nothing-here\n"),
      at(3, 10) + "data.train.0.path: " + (dir / "nothing-here").string() + " does not exist");
  EXPECT_HAS(
      error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8, vocab: 300}\n"
               "data: {tokenizer: tok.json, train: data.txt}\n"),
      "data.tokenizer: " + (dir / "tok.json").string() + " is not a file");
  EXPECT_HAS(error_of(kGpt2 + "train: {}\n", {"data.train=[{path: data.txt, weight: 0}]"}),
             "--set data.train=[{path: data.txt, weight: 0}]: data.train.0.weight: must be > 0");
}

TEST_F(RecipeTest, TokenizerFileNeedsAnExplicitVocab) {
  write("tok.json", "{}");
  EXPECT_HAS(error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
                      "data: {tokenizer: tok.json, train: data.txt}\n"),
             at(1, 8) + "model.vocab: missing (required unless data.tokenizer is byte)");
}

TEST_F(RecipeTest, UnwritableOutputs) {
  EXPECT_HAS(error_of(kGpt2 + "checkpoint:\n  dir: /proc/llmrun-x\n"),
             at(10, 8) + "checkpoint.dir: /proc/llmrun-x is not writable");
  write("file", "x");
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {dir: file/sub}\n"),
             "checkpoint.dir: " + (dir / "file/sub").string() + " cannot be created");
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {dir: file}\n"),
             "checkpoint.dir: " + (dir / "file").string() + " is not a directory");
  EXPECT_HAS(
      error_of(kGpt2 + "logging: {metrics: /proc/llmrun-x/m.jsonl}\n"),
      "logging.metrics: cannot write /proc/llmrun-x/m.jsonl: /proc/llmrun-x is not writable");
  EXPECT_HAS(error_of(kGpt2 + "logging: {metrics: .}\n"),
             "logging.metrics: " + dir.string() + " is a directory");
  EXPECT_EQ(error_of(kGpt2 + "checkpoint: {dir: a/b/c}\nlogging: {metrics: a/b/m.jsonl}\n"), "");
  EXPECT_FALSE(fs::exists(dir / "a")) << "loading must not create anything";
}

TEST_F(RecipeTest, UnsupportedSectionsAreRejected) {
  EXPECT_HAS(error_of(kGpt2 + "parallel:\n  tp: 3\nlaunch: {nproc: 3}\n"),
             at(10, 7) + "parallel.tp: model.heads=4 is not divisible by tp=3");
  EXPECT_HAS(error_of(kGpt2 + "parallel: {tp: 4}\nlaunch: {nproc: 4}\n", {"model.ffn=6"}),
             "parallel.tp: model.ffn=6 is not divisible by tp=4");
  EXPECT_HAS(error_of(kGpt2 + "parallel: {tp: 2, sequence_parallel: true}\nlaunch: {nproc: 2}\n",
                      {"train.micro_batch=1", "model.seq_len=31"}),
             "parallel.sequence_parallel: micro_batch x seq_len = 31 tokens do not split evenly "
             "over tp=2");
  EXPECT_HAS(error_of(kGpt2 + "memory: {recompute: some}\n"),
             "memory.recompute: 'some' is not one of none, selective, full");
  EXPECT_HAS(error_of(kGpt2 + "memory: {budget_bytes: lots}\n"),
             "memory.budget_bytes: 'lots' is not a size such as 80GB");
  EXPECT_HAS(error_of(kGpt2 + "memory: {offload: {optimizer: nvme}}\n"),
             "memory.offload.nvme_path: missing");
  EXPECT_HAS(error_of(kGpt2 + "memory: {offload: {optimizer: disk}}\n"),
             "memory.offload.optimizer: 'disk' is not one of none, cpu, nvme");
  EXPECT_HAS(error_of(kGpt2 + "memory: {offload: {params: disk}}\nparallel: {zero: 3}\n"),
             "memory.offload.params: 'disk' is not one of none, cpu, nvme");
  EXPECT_HAS(error_of(kGpt2 + "memory: {offload: {params: nvme}}\nparallel: {zero: 3}\n"),
             "memory.offload.nvme_path: missing: params: nvme needs a directory");
  EXPECT_HAS(error_of(kGpt2 + "memory: {offload: {params: cpu}}\nparallel: {zero: 2}\n"),
             "memory.offload.params: cpu needs parallel.zero: 3 (parameters are offloaded as "
             "ZeRO-3 shards); "
             "parallel.zero is 2");
  EXPECT_EQ(error_of(kGpt2 + "memory: {offload: {params: cpu}}\nparallel: {zero: 3}\n"), "");
  EXPECT_HAS(error_of(kGpt2 + "parallel: {sequence_parallel: true}\n"),
             "parallel.sequence_parallel: needs parallel.tp > 1");
  EXPECT_HAS(error_of(kGpt2 + "precision:\n  compute: fp16\n"),
             at(10, 12) + "precision.compute: 'fp16' is not one of fp32, bf16");
  EXPECT_EQ(error_of(kGpt2 + "precision:\n  compute: bf16\n"), "");
  EXPECT_HAS(error_of(kGpt2 + "launch:\n  backend: gpu\n"),
             at(10, 12) + "launch.backend: 'gpu' is not one of auto, cpu, cuda");
  EXPECT_EQ(error_of(kGpt2 + "launch:\n  backend: cpu\n"), "");
  EXPECT_HAS(error_of("model: {from: hf/gpt2}\ndata: {train: data.txt}\n"),
             "model.from: " + (dir / "hf/gpt2").string() + " is not a directory");
  EXPECT_HAS(error_of("model: {arch: gpt2, layers: 1, d_model: 8, heads: 2, seq_len: 8}\n"
                      "data: {train: data.txt, valid: [{path: nowhere}]}\n"),
             "data.valid.0.path: ");
  EXPECT_HAS(error_of(kGpt2, {"train.eval_batches=0"}), "train.eval_batches: must be >= 1");
  EXPECT_HAS(error_of(kGpt2, {"train.eval_every=5"}),
             "train.eval_every: validation every 5 steps needs data.valid");
}

TEST_F(RecipeTest, CheckpointCadenceAndResume) {
  const Recipe r = load_recipe(
      write("r.yaml", kGpt2 + "checkpoint: {dir: out, every: 50, keep: 2, resume: auto}\n"));
  EXPECT_EQ(r.checkpoint.every, 50);
  EXPECT_EQ(r.checkpoint.keep, 2);
  EXPECT_EQ(r.checkpoint.resume, "auto");
  const Recipe p = load_recipe(write("p.yaml", kGpt2 + "checkpoint: {resume: old/step-0000100}\n"));
  EXPECT_EQ(p.checkpoint.resume, (dir / "old/step-0000100").string());
  EXPECT_HAS(error_of(kGpt2 + "checkpoint:\n  every: 100\n"),
             at(10, 10) + "checkpoint.every: needs checkpoint.dir");
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {resume: auto}\n"),
             "checkpoint.resume: needs checkpoint.dir");
  EXPECT_FALSE(r.checkpoint.async);
  EXPECT_TRUE(load_recipe(write("a.yaml", kGpt2 + "checkpoint: {dir: out, async: true}\n"))
                  .checkpoint.async);
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {async: true}\n"),
             "checkpoint.async: needs checkpoint.dir");
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {dir: out, async: sometimes}\n"), "checkpoint.async");
  EXPECT_HAS(error_of(kGpt2 + "checkpoint: {dir: out, keep: -1}\n"), "checkpoint.keep");
}

// Model-parallel layouts load (llmrun plan models them) when they fit the model and batch;
// the reasons for refusing one name the key to change.
TEST_F(RecipeTest, ModelParallelLayouts) {
  const std::vector<std::string> four = {"launch.nproc=4", "train.global_batch=8",
                                         "train.micro_batch=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), four.begin(), four.end());
    return extra;
  };
  const Recipe r =
      load_recipe(write("r.yaml", kGpt2),
                  with({"parallel.tp=2", "parallel.pp=2", "memory.recompute=full",
                        "parallel.sequence_parallel=true", "memory.budget_bytes=2GiB"}));
  EXPECT_EQ(r.parallel.dp, 1);
  EXPECT_EQ(r.memory.recompute, Recompute::full);
  EXPECT_EQ(r.memory.budget_bytes, int64_t(2) << 30);
  // FP8 runs under any layout (amaxes are reduced over every rank).
  const Recipe f =
      load_recipe(write("r.yaml", kGpt2),
                  with({"parallel.tp=2", "parallel.pp=2", "precision.fp8.enabled=true"}));
  EXPECT_TRUE(f.precision.fp8.enabled);
  EXPECT_EQ(f.parallel.tp * f.parallel.pp, 4);
  EXPECT_HAS(error_of(kGpt2, with({"parallel.tp=4", "model.heads=2", "model.d_model=64"})),
             "parallel.tp: model.heads=2 is not divisible by tp=4");
  EXPECT_HAS(
      error_of(kGpt2, with({"parallel.pp=4"})),
      "parallel.pp: pp x virtual_stages = 4 pipeline stages but the model has only 2 layers");
  EXPECT_HAS(error_of(kGpt2, with({"parallel.pp=2", "parallel.zero=2"})),
             "parallel.zero: ZeRO-2/3 shard gradients");
  EXPECT_HAS(error_of(kGpt2, with({"parallel.pp=2", "parallel.pp_layers=[1, 2]"})),
             "parallel.pp_layers sums to 3 blocks but model.layers is 2");
  EXPECT_HAS(error_of(kGpt2, with({"parallel.pp=2", "parallel.pp_schedule=interleaved",
                                   "parallel.virtual_stages=2", "model.layers=4",
                                   "train.global_batch=6"})),
             "train.global_batch: 6 is not a multiple of train.micro_batch x parallel.dp = 4");
  EXPECT_HAS(error_of(kGpt2, with({"parallel.pp=2", "parallel.pp_schedule=interleaved",
                                   "parallel.virtual_stages=2", "model.layers=4", "parallel.dp=2",
                                   "parallel.tp=1", "train.global_batch=4"})),
             "parallel.virtual_stages: pipeline schedule interleaved: the micro-batches per step "
             "(1) must be a multiple of parallel.pp (2)");
  EXPECT_HAS(error_of(kGpt2, with({"parallel.virtual_stages=2"})),
             "parallel.virtual_stages: needs parallel.pp_schedule=interleaved");
}

TEST_F(RecipeTest, SetOverridesApplyWithTheSameChecks) {
  const std::string path = write("r.yaml", kGpt2);
  const Recipe r = load_recipe(path, {"train.steps=7", "model.layers=3", "train.betas=[0.5, 0.6]",
                                      "logging.every=2", "train.steps=9"});
  EXPECT_EQ(r.train.steps, 9);  // the last --set of a key wins
  EXPECT_EQ(r.model.layers, 3);
  EXPECT_DOUBLE_EQ(r.train.beta2, 0.6);
  EXPECT_EQ(r.logging.every, 2);

  EXPECT_HAS(error_of(kGpt2, {"train.steps=0"}),
             "--set train.steps=0: train.steps: must be >= 1, got 0");
  EXPECT_HAS(error_of(kGpt2, {"train.steps=abc"}),
             "--set train.steps=abc: train.steps: expected an integer, got 'abc'");
  EXPECT_HAS(error_of(kGpt2, {"model.heads=12"}),
             "--set model.heads=12: model.heads: 12 does not divide model.d_model=64");
  // The check is reported on model.heads, but the value at fault came from the flag.
  EXPECT_HAS(error_of(kGpt2, {"model.d_model=90"}),
             "--set model.d_model=90: model.heads: 4 does not divide model.d_model=90");
  EXPECT_HAS(error_of(kGpt2, {"train.warmup=1000"}),
             "--set train.warmup=1000: train.warmup: 1000 is more than train.steps=100");
  EXPECT_HAS(error_of(kGpt2, {"precision.compute=fp16"}),
             "--set precision.compute=fp16: precision.compute: 'fp16' is not one of fp32, bf16");
  EXPECT_HAS(error_of(kGpt2, {"launch.backend=tpu"}),
             "--set launch.backend=tpu: launch.backend: 'tpu' is not one of auto, cpu, cuda");
  EXPECT_HAS(error_of(kGpt2, {"checkpoint.dir=/proc/llmrun-x"}),
             "--set checkpoint.dir=/proc/llmrun-x: checkpoint.dir: /proc/llmrun-x is not writable");
}

TEST_F(RecipeTest, BadSetIsRejected) {
  EXPECT_HAS(error_of(kGpt2, {"train.steps"}), "--set train.steps: expected KEY=VALUE");
  EXPECT_HAS(error_of(kGpt2, {"=3"}), "--set =3: expected KEY=VALUE");
  EXPECT_HAS(error_of(kGpt2, {"train..steps=3"}), "--set train..steps=3: empty name");
  EXPECT_HAS(error_of(kGpt2, {"model.foo=1"}), "--set model.foo=1: model.foo: unknown key");
  EXPECT_HAS(error_of(kGpt2, {"modle.layers=1"}), "--set modle.layers=1: modle: unknown key");
  EXPECT_HAS(error_of(kGpt2, {"parallel.tp=3", "launch.nproc=3"}),
             "--set parallel.tp=3: parallel.tp: model.heads=4 is not divisible by tp=3");
  EXPECT_HAS(error_of(kGpt2, {"parallel.pp_schedule=zigzag"}),
             "--set parallel.pp_schedule=zigzag: parallel.pp_schedule: unknown pipeline schedule "
             "'zigzag'");
  EXPECT_HAS(error_of(kGpt2, {"model.layers.x=1"}),
             "--set model.layers.x=1: model.layers: holds the value '2', it has no key 'x'");
  EXPECT_HAS(error_of(kGpt2, {"train.lr=[1"}), "--set train.lr=[1: cannot parse the value");
  EXPECT_HAS(error_of(kGpt2 + "train: {betas: [0.9, 0.95]}\n", {"train.betas.2=0.5"}),
             "--set train.betas.2=0.5: train.betas: a list of 2 items has no item '2'");
}

TEST_F(RecipeTest, NothingIsWrittenOnBadInput) {
  error_of(kGpt2 + "checkpoint: {dir: out}\nlogging: {metrics: out/m.jsonl}\ntrain: {lr: -1}\n");
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST_F(RecipeTest, DescribeShowsResolvedAndDerivedValues) {
  const Recipe r =
      load_recipe(write("r.yaml", kGpt2 + "train: {micro_batch: 2, global_batch: 8}\n"));
  const std::string d = describe_recipe(r);
  EXPECT_HAS(d, "  ffn: 256\n");
  EXPECT_HAS(d, "  kv_heads: 4\n");
  EXPECT_HAS(d, "  tie_embeddings: true\n");
  EXPECT_HAS(d, "  lr: 0.0003\n");
  EXPECT_HAS(d, "  min_lr: 3e-05\n");
  EXPECT_HAS(d, "  norm_eps: 1e-05\n");
  EXPECT_HAS(d, "  betas: [0.9, 0.95]\n");
  EXPECT_HAS(d, "    - {path: " + (dir / "data.txt").string() + ", weight: 1}\n");
  EXPECT_HAS(d, "derived:\n");
  EXPECT_HAS(d, "  parameters: " + std::to_string(r.model.param_count()) + "  # ");
  EXPECT_HAS(d, "  matmul_parameters: " + std::to_string(r.model.matmul_param_count()));
  EXPECT_HAS(d, "  grad_accum_steps: 4\n");
  EXPECT_HAS(d, "  tokens_per_step: 256\n");
  const auto flops = int64_t(r.model.train_flops_per_token(32));
  EXPECT_HAS(d, "  flops_per_token: " + std::to_string(flops) + "  # ");
  EXPECT_HAS(d, "  flops_per_step: " + std::to_string(flops * 256) + "  # ");
}

TEST_F(RecipeTest, DescribeOutputLoadsBackAsTheSameRecipe) {
  const Recipe a = load_recipe(
      write("r.yaml",
            "model: {arch: llama, layers: 2, d_model: 64, heads: 4, kv_heads: 2, seq_len: 16}\n"
            "data: {train: [{path: data.txt, weight: 0.5}]}\n"
            "train: {lr: 3e-4, betas: [0.9, 0.999], seed: 42}\n"
            "checkpoint: {dir: 'odd: name'}\n"));
  std::string text = describe_recipe(a);
  text = text.substr(0, text.find("derived:"));
  const Recipe b = load_recipe(write("again.yaml", text));
  EXPECT_EQ(describe_recipe(b).substr(describe_recipe(b).find('\n')),
            describe_recipe(a).substr(describe_recipe(a).find('\n')));
  EXPECT_EQ(b.checkpoint.dir, (dir / "odd: name").string());
}

TEST_F(RecipeTest, Gpt2SmallReadsAs124M) {
  const fs::path repo = LLMRUN_SOURCE_DIR;
  const Recipe r = load_recipe((repo / "recipes/gpt2-124m.yaml").string(), {"model.seq_len=1024"});
  EXPECT_EQ(r.model.param_count(), 124439808);  // Hugging Face's gpt2 checkpoint
  EXPECT_HAS(describe_recipe(r), "# 124.4M\n");
}

TEST(RepoRecipes, AllLoad) {
  const fs::path repo = LLMRUN_SOURCE_DIR;
  int n = 0;
  for (const auto& e : fs::directory_iterator(repo / "recipes")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    SCOPED_TRACE(e.path().string());
    Recipe r;
    ASSERT_NO_THROW(r = load_recipe(e.path().string()));
    EXPECT_FALSE(describe_recipe(r).empty());
    EXPECT_EQ(r.checkpoint.dir, (repo / "runs" / e.path().stem()).string());
  }
  EXPECT_GE(n, 3);
  const Recipe demo = load_recipe((repo / "recipes/demo.yaml").string());
  EXPECT_EQ(demo.model.layers, 4);
  EXPECT_EQ(demo.data.train[0].path, "/usr/share/common-licenses");
  EXPECT_EQ(demo.logging.metrics, (repo / "runs/demo/metrics.jsonl").string());
  const Recipe llama = load_recipe((repo / "recipes/llama-small.yaml").string());
  EXPECT_EQ(llama.model.arch, Arch::llama);
  EXPECT_EQ(llama.model.kv_heads, 4);
  EXPECT_EQ(llama.model.ffn, 688);
}

}  // namespace

TEST_F(RecipeTest, Fp8SectionReadsAndRejectsBadValues) {
  const Recipe def = load_recipe(write("r.yaml", kGpt2));
  EXPECT_FALSE(def.precision.fp8.enabled);
  EXPECT_EQ(def.precision.fp8.format, Fp8Scheme::hybrid);
  EXPECT_EQ(def.precision.fp8.amax_history, 16);
  EXPECT_EQ(def.precision.fp8.amax_compute, AmaxCompute::max);
  EXPECT_EQ(def.precision.fp8.margin, 0);
  EXPECT_EQ(def.precision.fp8.skip, (std::vector<std::string>{"lm_head", "embedding"}));

  const Recipe r = load_recipe(
      write("r.yaml", kGpt2 + "precision:\n"
                              "  fp8: {enabled: true, format: e4m3, amax_history: 4, "
                              "amax_compute: most_recent, margin: 2, skip: [embedding, down]}\n"));
  EXPECT_TRUE(r.precision.fp8.enabled);
  EXPECT_EQ(r.precision.fp8.format, Fp8Scheme::e4m3);
  EXPECT_EQ(r.precision.fp8.amax_history, 4);
  EXPECT_EQ(r.precision.fp8.amax_compute, AmaxCompute::most_recent);
  EXPECT_EQ(r.precision.fp8.margin, 2);
  EXPECT_EQ(r.precision.fp8.skip, (std::vector<std::string>{"embedding", "down"}));

  // Line 9 is "precision:", line 10 the fp8 mapping.
  auto fp8 = [&](const std::string& body) {
    return error_of(kGpt2 + "precision:\n  fp8: {" + body + "}\n");
  };
  EXPECT_HAS(fp8("format: e5m2"), "precision.fp8.format: 'e5m2' is not one of hybrid");
  EXPECT_HAS(fp8("amax_compute: mean"),
             "precision.fp8.amax_compute: 'mean' is not one of max, most_recent");
  EXPECT_HAS(fp8("amax_history: 0"), "precision.fp8.amax_history: must be >= 1");
  EXPECT_HAS(fp8("margin: -1"), "precision.fp8.margin: must be >= 0");
  EXPECT_HAS(fp8("enabled: maybe"), "precision.fp8.enabled: expected true or false");
  EXPECT_HAS(fp8("scaling: delayed"),
             "precision.fp8.scaling: unknown key (expected one of: enabled, format");
  EXPECT_HAS(fp8("skip: [embedding, attn]"),
             at(10, 27) +
                 "precision.fp8.skip.1: 'attn' is not a layer name (expected one of: qkv, out, up, "
                 "down, lm_head, embedding)");
  EXPECT_HAS(fp8("skip: [embedding, up, up]"), "precision.fp8.skip.2: 'up' is listed twice");
  EXPECT_HAS(fp8("skip: [lm_head]"), "precision.fp8.skip: must list embedding");
  EXPECT_HAS(fp8("skip: qkv"), "precision.fp8.skip: expected a list of layer names");
  EXPECT_HAS(error_of(kGpt2, {"precision.fp8.format=e3m4"}),
             "--set precision.fp8.format=e3m4: precision.fp8.format: 'e3m4' is not one of");
}
