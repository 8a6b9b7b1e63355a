// Multi-LoRA serving pieces below the HTTP layer: the prefix cache keyed per adapter, the
// registry's refusals, the scheduler's --max-loras rule (adapters per batch), and LoraBatchRunner's
// per-row-group delta checked against a host computation of x W^T + (alpha / r) x A^T B^T (fused
// q|k|v GEMM, adapters on q and v only, so each target's B lands in its own columns) with
// base rows left exactly as the base.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <limits>
#include <random>

#include "backend/backend_factory.h"
#include "ckpt/peft_adapter.h"
#include "serve/kv_block_manager.h"
#include "serve/lora_delta.h"
#include "serve/lora_registry.h"
#include "serve/lora_runner.h"
#include "serve/scheduler.h"
#include "tiny_model.h"
#include "util/error.h"

namespace llmrun {
namespace {

namespace fs = std::filesystem;

TEST(LoraServe, PrefixCacheNeverSharesAcrossSeeds) {
  KvBlockManager kv(16, 4, true);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  SeqBlocks a;
  EXPECT_EQ(kv.acquire_prefix(a, tokens, 8, 111), 0);
  ASSERT_TRUE(kv.ensure(a, 9));
  kv.publish(a, tokens, 9);
  SeqBlocks same, other, base;
  EXPECT_EQ(kv.acquire_prefix(same, tokens, 8, 111), 8);
  EXPECT_EQ(kv.acquire_prefix(other, tokens, 8, 222), 0);
  EXPECT_EQ(kv.acquire_prefix(base, tokens, 8), 0);
  for (SeqBlocks* s : {&a, &same, &other, &base}) kv.release(*s);
}

struct Fixture {
  std::unique_ptr<Backend> be = make_backend(BackendKind::cpu, 1);
  ModelConfig cfg = test_models::tiny_config(Arch::llama, 32, 64, 64, 16);
  Transformer model{*be, cfg, StoreOptions{1, true, false}};
  fs::path dir =
      fs::temp_directory_path() / ("llmrun_lora_serve_" + std::to_string(std::random_device{}()));
  LoraSection sec;
  std::vector<HfTensor> tensors;

  Fixture() {
    model.init_weights(3);
    sec.enabled = true;
    sec.rank = 2;
    sec.alpha = 6;
    sec.targets = {"q_proj", "v_proj", "down_proj"};
    const LoraLayout layout = lora_layout(cfg, model.shard(), sec);
    std::mt19937 rng(7);
    for (const BucketLayout& b : layout.buckets)
      for (const ParamSpec& p : b.params) {
        HfTensor t{p.hf_name, p.full_shape, std::vector<float>(size_t(p.full_numel()))};
        for (float& v : t.data) v = std::normal_distribution<float>(0.0f, 0.5f)(rng);
        tensors.push_back(std::move(t));
      }
    write_peft_adapter(dir / "a", tensors, sec, cfg, "base");
  }
  ~Fixture() { fs::remove_all(dir); }
  const HfTensor& tensor(const std::string& name) const {
    for (const HfTensor& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
};

TEST(LoraServe, RegistryRefusesBadAdaptersAndKeepsTheGoodOnes) {
  Fixture f;
  LoraRegistry reg(f.model, "base", 2, 2);
  reg.load("a", (f.dir / "a").string());
  EXPECT_NE(reg.find("a"), nullptr);
  auto refused = [&](const std::string& name, const fs::path& path, const std::string& what) {
    try {
      reg.load(name, path.string());
      ADD_FAILURE() << "loaded " << name;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused("a", f.dir / "a", "already loaded");
  refused("base", f.dir / "a", "base model's name");
  refused("b", f.dir / "missing", "is not a directory");
  LoraRegistry small(f.model, "base", 2, 1);
  try {
    small.load("a", (f.dir / "a").string());
    ADD_FAILURE() << "rank 2 loaded under --max-lora-rank 1";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 exceeds --max-lora-rank 1"), std::string::npos);
  }
  reg.load("b", (f.dir / "a").string());
  refused("c", f.dir / "a", "--max-cpu-loras");
  EXPECT_TRUE(reg.unload("b"));
  EXPECT_FALSE(reg.unload("b"));
  ASSERT_EQ(reg.list().size(), 1u);
  // Every load has its own prefix chain, also under a reused name.
  reg.load("b", (f.dir / "a").string());
  EXPECT_NE(reg.find("a")->prefix_seed(), reg.find("b")->prefix_seed());
  EXPECT_NE(reg.find("a")->prefix_seed(), kPrefixChainSeed);
}

// Runs `seqs` (submitted in order) through a Scheduler to completion: each step's scheduled
// chunks are computed and a sampling chunk appends a token; a sequence stops after `gen`
// tokens. Returns the most distinct adapters of any step, and checks that admission stayed
// first come first served (no sequence is first admitted before one submitted earlier).
int run_to_completion(Scheduler& sched, std::vector<std::unique_ptr<Sequence>>& seqs, int gen) {
  for (auto& s : seqs) sched.add(s.get());
  std::vector<Sequence*> admitted;
  int most = 0, finished = 0;
  for (int step = 0; finished < int(seqs.size()); ++step) {
    EXPECT_LT(step, 1000) << "sequences starve";
    if (step >= 1000) break;
    const std::vector<ScheduledChunk> chunks = sched.schedule();
    EXPECT_FALSE(chunks.empty()) << "a step with work waiting scheduled nothing";
    std::vector<Sequence*> stepped;
    for (const ScheduledChunk& c : chunks) stepped.push_back(c.seq);
    most = std::max(most, distinct_adapters(stepped));
    for (const ScheduledChunk& c : chunks) {
      Sequence* s = c.seq;
      if (std::find(admitted.begin(), admitted.end(), s) == admitted.end()) admitted.push_back(s);
      s->computed = c.start + c.n;
      if (!c.samples) continue;
      s->tokens.push_back(int32_t(s->tokens.size() % 7));
      if (s->generated() == gen) {
        sched.remove(s);
        ++finished;
      }
    }
  }
  EXPECT_EQ(sched.num_running() + sched.num_waiting(), 0);
  for (size_t i = 0; i < admitted.size(); ++i)
    EXPECT_EQ(admitted[i], seqs[i].get()) << "admission " << i << " overtook an earlier request";
  return most;
}

TEST(LoraServe, SchedulerMixesAtMostMaxLorasAdaptersPerStep) {
  Fixture f;
  LoraRegistry reg(f.model, "base", 0, 2);  // no limit on adapters loaded
  std::vector<std::shared_ptr<const ServedLora>> adapters;
  for (const char* name : {"a", "b", "c", "d"}) {
    reg.load(name, (f.dir / "a").string());
    adapters.push_back(reg.find(name));
  }
  // 14 requests over 4 adapters and the base, interleaved, more adapters than --max-loras 2.
  auto make = [&] {
    std::vector<std::unique_ptr<Sequence>> seqs;
    for (int i = 0; i < 14; ++i) {
      auto s = std::make_unique<Sequence>();
      s->id = uint64_t(i);
      s->tokens.assign(size_t(3 + i % 4), int32_t(i));
      s->prompt_len = int(s->tokens.size());
      if (i % 5 != 4) s->params.lora = adapters[size_t(i % 5 % 4)];
      seqs.push_back(std::move(s));
    }
    return seqs;
  };
  for (int max_loras : {2, 1, 3}) {
    KvBlockManager kv(256, 4, false);
    Scheduler sched(kv, {64, 512, max_loras});
    auto seqs = make();
    EXPECT_EQ(run_to_completion(sched, seqs, 5), max_loras) << "--max-loras " << max_loras;
    EXPECT_EQ(sched.max_step_loras(), max_loras);
    EXPECT_GT(sched.lora_waits(), 0) << "--max-loras " << max_loras << " held nothing back";
  }
  // Without the limit the same requests put every adapter into one step: the cap above is the
  // scheduler's doing.
  KvBlockManager kv(256, 4, false);
  Scheduler unlimited(kv, {64, 512, 0});
  auto seqs = make();
  EXPECT_EQ(run_to_completion(unlimited, seqs, 5), 4);
  EXPECT_EQ(unlimited.lora_waits(), 0);
}

TEST(LoraServe, RunnerAddsEachRowGroupsOwnDelta) {
  Fixture f;
  LoraRegistry reg(f.model, "base", 4, 2);
  reg.load("a", (f.dir / "a").string());
  const auto lora = reg.find("a");
  LoraBatchRunner runner(f.model, 8, reg.max_width());
  const int n = 5, d = f.cfg.d_model, hd = f.cfg.head_dim();
  const int q_cols = f.cfg.heads * hd, kv_cols = f.cfg.kv_heads * hd, out = q_cols + 2 * kv_cols;
  const Tensor W = block_tensors(f.cfg, f.model.params(), 1).qkv_w;  // [out, d]
  std::vector<float> x(size_t(n * d)), y(size_t(n * out), 0.0f), w(size_t(out * d));
  std::mt19937 rng(9);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  f.be->copy(Tensor(w.data(), DType::f32, {out, d}), W);
  // Rows 0-1: sequence 0 (base); rows 2-4: sequence 1 (adapter a).
  runner.set_step({nullptr, lora.get()}, {0, 2, 5});
  Tensor xt(x.data(), DType::f32, {n, d}), yt(y.data(), DType::f32, {n, out});
  runner.forward(*f.be, LinearSite{1, LinearKind::qkv}, yt, xt, W, nullptr, false);
  const std::string p = "base_model.model.model.layers.1.self_attn.";
  const HfTensor &qa = f.tensor(p + "q_proj.lora_A.weight"),
                 &qb = f.tensor(p + "q_proj.lora_B.weight");
  const HfTensor &va = f.tensor(p + "v_proj.lora_A.weight"),
                 &vb = f.tensor(p + "v_proj.lora_B.weight");
  const double scale = f.sec.alpha / f.sec.rank;
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < out; ++c) {
      double want = 0;
      for (int k = 0; k < d; ++k) want += double(x[size_t(r * d + k)]) * w[size_t(c * d + k)];
      const HfTensor* a = c < q_cols ? &qa : c >= q_cols + kv_cols ? &va : nullptr;
      const HfTensor* b = c < q_cols ? &qb : &vb;
      const int row = c < q_cols ? c : c - q_cols - kv_cols;
      if (r >= 2 && a)
        for (int j = 0; j < 2; ++j) {
          double u = 0;
          for (int k = 0; k < d; ++k)
            u += double(x[size_t(r * d + k)]) * a->data[size_t(j * d + k)];
          want += scale * u * b->data[size_t(row * 2 + j)];
        }
      EXPECT_NEAR(y[size_t(r * out + c)], want, 1e-4 * (1 + std::abs(want))) << r << "," << c;
    }
}

// Small deltas run with OpenMP regions made serial (lora_runner.cpp): the switch must be undone
// after every forward (else every later kernel of the process would run on one thread), and a
// row's output must stay bitwise the same alone and inside a batch of other adapters' rows.
TEST(LoraServe, RunnerKeepsOpenMpAndRowsBatchInvariant) {
  Fixture f;
  const std::unique_ptr<Backend> be2 = make_backend(BackendKind::cpu, 2);
  LoraRegistry reg(f.model, "base", 4, 2);
  reg.load("a", (f.dir / "a").string());
  reg.load("b", (f.dir / "a").string());
  const auto a = reg.find("a"), b = reg.find("b");
  LoraBatchRunner runner(f.model, 8, reg.max_width());
  const int n = 8, d = f.cfg.d_model;
  const Tensor W = block_tensors(f.cfg, f.model.params(), 0).down_w;  // [d, ffn]
  const int in = int(W.cols());
  std::vector<float> x(size_t(n * in)), batch(size_t(n * d)), alone(static_cast<size_t>(d));
  std::mt19937 rng(11);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  const int levels = omp_get_max_active_levels();
  // Rows 0-2: adapter b; 3-4: the base; 5-7: adapter a (row 6 is checked alone below).
  runner.set_step({b.get(), nullptr, a.get()}, {0, 3, 5, 8});
  runner.forward(*be2, LinearSite{0, LinearKind::down}, Tensor(batch.data(), DType::f32, {n, d}),
                 Tensor(x.data(), DType::f32, {n, in}), W, nullptr, false);
  EXPECT_EQ(omp_get_max_active_levels(), levels);
  runner.set_step({a.get()}, {0, 1});
  runner.forward(*be2, LinearSite{0, LinearKind::down}, Tensor(alone.data(), DType::f32, {1, d}),
                 Tensor(x.data() + 6 * in, DType::f32, {1, in}), W, nullptr, false);
  EXPECT_EQ(omp_get_max_active_levels(), levels);
  for (int c = 0; c < d; ++c) EXPECT_EQ(alone[size_t(c)], batch[size_t(6 * d + c)]) << c;
}

// Prefill-sized deltas spread row tiles over threads (serial_macs 0 forces it here): every row
// must come out bitwise as on one thread, and as alone, over the fused q|k|v GEMM (several
// targets, columns not a multiple of the kernel's 16) with groups of 5, 2 (base) and 4 rows.
TEST(LoraServe, RunnerThreadedDeltasEqualSerialOnes) {
  Fixture f;
  const std::unique_ptr<Backend> be2 = make_backend(BackendKind::cpu, 2);
  LoraRegistry reg(f.model, "base", 4, 2);
  reg.load("a", (f.dir / "a").string());
  reg.load("b", (f.dir / "a").string());
  const auto a = reg.find("a"), b = reg.find("b");
  const int n = 11, d = f.cfg.d_model;
  const Tensor W = block_tensors(f.cfg, f.model.params(), 1).qkv_w;  // [out, d]
  const int out = int(W.rows());
  std::vector<float> x(size_t(n * d)), serial(size_t(n * out)), threaded(serial.size()),
      alone(static_cast<size_t>(out));
  std::mt19937 rng(13);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  const LinearSite site{1, LinearKind::qkv};
  const Tensor xt(x.data(), DType::f32, {n, d});
  for (const int64_t serial_macs : {LoraBatchRunner::kDefaultSerialMacs, int64_t(0)}) {
    LoraBatchRunner runner(f.model, 16, reg.max_width(), serial_macs);
    runner.set_step({b.get(), nullptr, a.get()}, {0, 5, 7, 11});
    float* y = serial_macs == 0 ? threaded.data() : serial.data();
    runner.forward(*be2, site, Tensor(y, DType::f32, {n, out}), xt, W, nullptr, false);
    if (serial_macs != 0) continue;
    runner.set_step({a.get()}, {0, 1});
    runner.forward(*be2, site, Tensor(alone.data(), DType::f32, {1, out}),
                   Tensor(x.data() + 8 * d, DType::f32, {1, d}), W, nullptr, false);
  }
  for (size_t i = 0; i < serial.size(); ++i) ASSERT_EQ(serial[i], threaded[i]) << i;
  for (int c = 0; c < out; ++c) EXPECT_EQ(alone[size_t(c)], serial[size_t(8 * out + c)]) << c;
  // The adapters changed something: rows 0-4 and 7-10 differ from the base rows' computation.
  std::vector<float> base(size_t(n * out));
  inference_linear().forward(*be2, site, Tensor(base.data(), DType::f32, {n, out}), xt, W, nullptr,
                             false);
  EXPECT_NE(base[size_t(8 * out)], serial[size_t(8 * out)]);
  EXPECT_EQ(base[size_t(5 * out + 3)], serial[size_t(5 * out + 3)]);
}

// Decode-sized steps at 2 threads run the base GEMM's share and the deltas of each thread in
// one region (forward_fused; fused_base_macs 0 forces it on this small model): every y element
// must be bitwise what the base runner plus the serial deltas give, over the fused q|k|v GEMM
// (several targets) and the accumulating down projection with a bias, and a row alone must
// match the same row in the batch.
TEST(LoraServe, RunnerFusedRegionEqualsBaseThenDeltas) {
  Fixture f;
  const std::unique_ptr<Backend> be2 = make_backend(BackendKind::cpu, 2);
  LoraRegistry reg(f.model, "base", 4, 2);
  reg.load("a", (f.dir / "a").string());
  reg.load("b", (f.dir / "a").string());
  const auto a = reg.find("a"), b = reg.find("b");
  const int n = 10;
  std::mt19937 rng(17);
  for (const LinearKind kind : {LinearKind::qkv, LinearKind::down}) {
    const BlockTensors bt = block_tensors(f.cfg, f.model.params(), 1);
    const Tensor W = kind == LinearKind::qkv ? bt.qkv_w : bt.down_w;
    const int in = int(W.cols()), out = int(W.rows());
    const bool accumulate = kind == LinearKind::down;
    std::vector<float> x(size_t(n * in)), y0(size_t(n * out)), bias(static_cast<size_t>(out));
    for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    for (float& v : y0) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    for (float& v : bias) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    const Tensor xt(x.data(), DType::f32, {n, in}), bt_bias(bias.data(), DType::f32, {out});
    const LinearSite site{1, kind};
    std::vector<float> fused = y0, separate = y0, alone(y0.begin() + 7 * out, y0.begin() + 8 * out);
    {
      LoraBatchRunner runner(f.model, 16, reg.max_width(), LoraBatchRunner::kDefaultSerialMacs,
                             int64_t(0));
      // Rows 0-2: adapter b; 3-4: the base; 5-9: adapter a (row 7 is checked alone below).
      runner.set_step({b.get(), nullptr, a.get()}, {0, 3, 5, 10});
      runner.forward(*be2, site, Tensor(fused.data(), DType::f32, {n, out}), xt, W, &bt_bias,
                     accumulate);
      EXPECT_EQ(runner.fused_forwards(), 1);
      runner.set_step({a.get()}, {0, 1});
      runner.forward(*be2, site, Tensor(alone.data(), DType::f32, {1, out}),
                     Tensor(x.data() + 7 * in, DType::f32, {1, in}), W, &bt_bias, accumulate);
      EXPECT_EQ(runner.fused_forwards(), 2);
    }
    {
      LoraBatchRunner runner(f.model, 16, reg.max_width(), LoraBatchRunner::kDefaultSerialMacs,
                             std::numeric_limits<int64_t>::max());
      runner.set_step({b.get(), nullptr, a.get()}, {0, 3, 5, 10});
      runner.forward(*be2, site, Tensor(separate.data(), DType::f32, {n, out}), xt, W, &bt_bias,
                     accumulate);
      EXPECT_EQ(runner.fused_forwards(), 0);
    }
    for (size_t i = 0; i < fused.size(); ++i)
      ASSERT_EQ(fused[i], separate[i]) << linear_kind_name(kind) << " " << i;
    for (int c = 0; c < out; ++c)
      EXPECT_EQ(alone[size_t(c)], fused[size_t(7 * out + c)]) << linear_kind_name(kind) << " " << c;
    // The deltas are there: adapter rows differ from the base computed alone.
    std::vector<float> base = y0;
    inference_linear().forward(*be2, site, Tensor(base.data(), DType::f32, {n, out}), xt, W,
                               &bt_bias, accumulate);
    EXPECT_NE(base[size_t(7 * out)], fused[size_t(7 * out)]);
    EXPECT_EQ(base[size_t(3 * out + 1)], fused[size_t(3 * out + 1)]);
  }
}

// The CPU kernel over operands that span several packed panels (serve/lora_delta.h): width
// 3 x 24 = 72 (A panels of 64 and 16 columns), targets of 40 and 70 columns (B panels of 32,
// then 16 with 8 or 6 of y's columns in the last vector), 7 rows (tiles of 4 and 3), against a
// double-precision x A^T (scale B)^T added to y, and y's columns outside the targets untouched.
TEST(LoraServe, HostKernelMatchesReferenceAcrossPanels) {
  const int64_t in = 37, rank = 24, rows = 7, y_cols = 200;
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, 40}, {50, 70}, {130, 70}};
  const int64_t width = rank * int64_t(spans.size());
  std::mt19937 rng(21);
  auto fill = [&](std::vector<float>& v) {
    for (float& e : v) e = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  };
  std::vector<float> a(size_t(width * in)), x(size_t(rows * in)), y(size_t(rows * y_cols));
  fill(a);
  fill(x);
  fill(y);
  std::vector<std::vector<float>> bs;
  std::vector<LoraTargetSource> sources;
  for (const auto& [begin, cols] : spans) {
    bs.emplace_back(size_t(cols * rank));
    fill(bs.back());
    sources.push_back({begin, cols, bs.back().data()});
  }
  const float scale = 0.75f;
  const LoraHostSite site = lora_pack_site(in, rank, a.data(), sources, scale);
  EXPECT_EQ(site.macs_per_row(), in * width + rank * (40 + 70 + 70));
  const std::vector<float> y0 = y;
  std::vector<float> u(size_t(kLoraTileRows * lora_pad(width)));
  lora_host_delta(site, x.data(), rows, y.data(), y_cols, u.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < y_cols; ++c) {
      double want = y0[size_t(r * y_cols + c)];
      for (size_t t = 0; t < spans.size(); ++t) {
        const auto [begin, cols] = spans[t];
        if (c < begin || c >= begin + cols) continue;
        for (int64_t j = 0; j < rank; ++j) {
          double uj = 0;
          for (int64_t k = 0; k < in; ++k)
            uj += double(x[size_t(r * in + k)]) * a[size_t((int64_t(t) * rank + j) * in + k)];
          want += scale * uj * bs[t][size_t((c - begin) * rank + j)];
        }
      }
      EXPECT_NEAR(y[size_t(r * y_cols + c)], want, 1e-3 * (1 + std::abs(want))) << r << "," << c;
    }
  EXPECT_EQ(y[size_t(45)], y0[size_t(45)]);  // between the first two targets
}

}  // namespace
}  // namespace llmrun
