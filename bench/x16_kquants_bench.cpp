// The x16 Q4_K / Q6_K kernels (src/quant/x16_kquants_avx512.cpp) against the avx2 level on the
// same weights, one thread: QuantPlan::run built and run at avx2 (at avx512 a plan runs these
// x16 kernels themselves; activation quantization included; at n = 1 the GemvPlan decode
// kernels, at n > 1 the avx2 tiles) and, for x16, the same
// activation quantization (prepare_activation) followed by one dot per 16-row group. The best
// of `reps` runs in thread CPU time (CLOCK_THREAD_CPUTIME_ID), so other load on a shared
// machine costs less than in wall time. Prints ns per weight value per activation row.
//   x16_kquants_bench [REPS]
// Shapes: 3072 x 768 and 768 x 3072 (out x in) at C = 1, 8, 32; 50257 x 768 at C = 1.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "quant/quant_dot.h"
#include "quant/quant_matmul.h"
#include "quant/x16_ops.h"

using namespace llmrun::quant;

namespace {

double cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The best time of each of `fs`, measured in `reps` rounds that run each once in turn, so
// that the variants see the same background load.
template <class... F>
std::vector<double> best_of(int reps, F&&... fs) {
  std::vector<double> best(sizeof...(F), 1e30);
  for (int r = -1; r < reps; ++r) {  // round -1 warms up
    size_t k = 0;
    (
        [&] {
          const double t0 = cpu();
          fs();
          if (r >= 0) best[k] = std::min(best[k], cpu() - t0);
          ++k;
        }(),
        ...);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  if (!simd_level_supported(SimdLevel::avx512)) {
    std::printf("SKIPPED: this CPU lacks AVX-512 VNNI\n");
    return 0;
  }
  // the plans below copy nothing into x16 and run the avx2 kernels; the x16 tables are called
  // directly
  set_simd_level(SimdLevel::avx2);
  std::printf(
      "| type | matrix (out x in) | C | avx2 QuantPlan ns/value | x16 ns/value | x16 dot alone "
      "ns/value | speed-up |\n|---|---|---|---|---|---|---|\n");
  for (QType t : {QType::q4_k, QType::q6_k}) {
    const detail::X16Ops* ops =
        t == QType::q4_k ? detail::x16_ops_q4_k_avx512() : detail::x16_ops_q6_k_avx512();
    // and GPT-2's LM head at C = 1, streamed from DRAM (50257 rows: a last group of 1 row)
    for (auto [out, in] : {std::pair<int64_t, int64_t>{3072, 768}, {768, 3072}, {50257, 768}}) {
      std::mt19937 rng(1);
      std::normal_distribution<float> g;
      const size_t rb = row_bytes(t, in);
      std::vector<uint8_t> w(rb * size_t(out));
      std::vector<float> row(static_cast<size_t>(in));
      for (int64_t r = 0; r < out; ++r) {
        for (auto& v : row) v = g(rng);
        quantize_row(t, row.data(), w.data() + size_t(r) * rb, in);
      }
      const int64_t groups = (out + detail::kX16Rows - 1) / detail::kX16Rows;
      const size_t gb = ops->group_bytes(in);
      // 64-byte aligned, as a loader's buffer would be (a misaligned one costs up to 15%)
      std::vector<uint8_t> packed_buf(gb * size_t(groups) + 64);
      uint8_t* packed =
          packed_buf.data() + (64 - reinterpret_cast<uintptr_t>(packed_buf.data()) % 64) % 64;
      for (int64_t gi = 0; gi < groups; ++gi) {
        const uint8_t* rows[detail::kX16Rows];
        const int nr = int(std::min<int64_t>(detail::kX16Rows, out - gi * detail::kX16Rows));
        for (int l = 0; l < nr; ++l) rows[l] = w.data() + rb * size_t(gi * detail::kX16Rows + l);
        ops->pack(in, rows, nr, packed + gb * size_t(gi));
      }
      QuantPlan plan({{t, out, in, w.data()}});
      for (int C : {1, 8, 32}) {
        if (out > 4096 && C > 1) continue;
        std::vector<float> x(size_t(C) * size_t(in)), y(size_t(C) * size_t(out));
        for (auto& v : x) v = g(rng);
        const size_t as = activation_row_bytes(t, in);
        std::vector<uint8_t> a(as * size_t(C));
        // one group's outputs past `out` land in the spare row of y2
        std::vector<float> y2(size_t(C) * size_t(groups * detail::kX16Rows));
        const size_t ldo = size_t(groups * detail::kX16Rows);
        const auto x16_dots = [&] {
          for (int64_t gi = 0; gi < groups; ++gi)
            ops->dot(in, packed + gb * size_t(gi), a.data(), as, C,
                     y2.data() + size_t(gi * detail::kX16Rows), ldo);
        };
        const auto times = best_of(
            reps, [&] { plan.run(x.data(), C, y.data(), out, nullptr, false); },
            [&] {
              for (int c = 0; c < C; ++c)
                prepare_activation(t, x.data() + size_t(c) * size_t(in), a.data() + as * size_t(c),
                                   in);
              x16_dots();
            },
            x16_dots);
        const double tp = times[0], tx = times[1], td = times[2];
        // both paths agree (a loose check: the kernels round differently)
        for (int c = 0; c < C; ++c)
          for (int64_t o = 0; o < out; ++o) {
            const float p = y[size_t(c * out + o)], q = y2[size_t(c) * ldo + size_t(o)];
            if (std::abs(p - q) > 1e-3f * (1 + std::abs(p))) {
              std::printf("MISMATCH %s c %d row %ld: %g vs %g\n", type_name(t), c, long(o), p, q);
              return 1;
            }
          }
        const double per = 1e9 / double(out * in * C);
        std::printf("| %s | %ld x %ld | %d | %.4f | %.4f | %.4f | %.2fx |\n", type_name(t),
                    long(out), long(in), C, tp * per, tx * per, td * per, tp / tx);
      }
    }
  }
  return 0;
}
