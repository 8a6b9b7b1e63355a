// The serving engine's thread computes at the OpenMP thread count of the thread that built
// it (the CPU backend's --threads), not at OpenMP's default: the count is per thread, and an
// engine thread left at the default ran `serve/generate --threads 1` steps on every core,
// 40x slower on a loaded machine (bench/RESULTS.md, speculative decoding).
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "backend/backend.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "serve/engine.h"
#include "tiny_model.h"

using namespace llmrun;

TEST(EngineThreads, EngineThreadKeepsTheBackendsOpenMPThreadCount) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads);  // sets this thread's OpenMP count
    ASSERT_EQ(omp_get_max_threads(), threads);
    Transformer model(*be, test_models::tiny_config(Arch::gpt2, 32, 64, 256, 64));
    model.init_weights(1);
    ByteLevelTokenizer tok;
    EngineConfig ec;
    ec.max_num_seqs = 4;
    ec.max_batched_tokens = 64;
    ec.block_size = 4;
    ec.num_blocks = 64;
    ec.max_model_len = 64;
    std::mutex mu;
    std::condition_variable cv;
    int seen = -1;
    bool done = false;
    {
      Engine engine(model, tok, ec);
      GenerationParams gp;
      gp.max_tokens = 3;
      engine.submit(tok.encode("abc"), gp, [&](SequenceEvent&& ev) {
        std::lock_guard<std::mutex> lock(mu);
        seen = omp_get_max_threads();  // sinks run on the engine thread
        done = done || ev.finished;
        cv.notify_all();
      });
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
    }
    EXPECT_EQ(seen, threads) << "the engine thread does not run at the backend's thread count";
  }
  omp_set_num_threads(saved);
}
