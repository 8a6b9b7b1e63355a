// The host-side logic of the CUDA backend, which runs (and is tested) without a GPU: the
// caching allocator's bookkeeping over a fake device, the row-major -> cuBLASLt mapping and
// the algorithm-cache key, launch geometry, and the cast/fill dtype dispatch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <unordered_set>

#include "../../kernels/geometry.cuh"
#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/dtype_dispatch.h"
#include "backend/cuda/gemm_plan.h"

using namespace llmrun;

namespace {

// A fake device: hands out distinct addresses, fails past a capacity, records what is live.
struct FakeDevice {
  size_t capacity = size_t(1) << 30;
  size_t used = 0;
  uintptr_t next = 0x10000;
  std::map<void*, size_t> live;
  int allocs = 0, frees = 0;

  CachingAllocator::Source source() {
    return {[this](size_t bytes) -> void* {
              if (used + bytes > capacity) return nullptr;
              void* p = reinterpret_cast<void*>(next);
              next += bytes + 4096;
              used += bytes;
              live[p] = bytes;
              ++allocs;
              return p;
            },
            [this](void* p) {
              auto it = live.find(p);
              ASSERT_NE(it, live.end()) << "free of an address the fake device never gave";
              used -= it->second;
              live.erase(it);
              ++frees;
            }};
  }
};

constexpr uintptr_t kStreamA = 1, kStreamB = 2;

TEST(CachingAllocator, RoundsSizesToClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(CachingAllocator::round_size((size_t(1) << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(CachingAllocator::round_size((size_t(5) << 20) + 7), size_t(6) << 20);
}

TEST(CachingAllocator, ReusesFreedBlocksOnTheSameStreamOnly) {
  FakeDevice dev;
  CachingAllocator a(dev.source(), "fake:0");
  void* p = a.allocate(1000, kStreamA, "x");
  a.free(p);
  EXPECT_EQ(a.stats().cached_bytes, 1024u);
  // Another stream must not get it: its kernels are not ordered after the old ones.
  void* q = a.allocate(1000, kStreamB, "y");
  EXPECT_NE(q, p);
  // The same stream gets it back without touching the device.
  void* r = a.allocate(900, kStreamA, "z");
  EXPECT_EQ(r, p);
  EXPECT_EQ(dev.allocs, 2);
  const auto s = a.stats();
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.live_bytes, 2048u);
  EXPECT_EQ(s.cached_bytes, 0u);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, BestFitButNotMoreThanTwiceTheRequest) {
  FakeDevice dev;
  CachingAllocator a(dev.source(), "fake:0");
  void* big = a.allocate(size_t(8) << 20, kStreamA, "big");
  void* mid = a.allocate(size_t(3) << 20, kStreamA, "mid");  // a 4 MiB block
  a.free(big);
  a.free(mid);
  // 3.5 MiB -> the 4 MiB class: the smallest cached block that fits (mid), not big.
  void* p = a.allocate((size_t(3) << 20) + (size_t(1) << 19), kStreamA, "p");
  EXPECT_EQ(p, mid);
  // 1 MiB: big (8 MiB) is more than twice as large: a new device allocation instead.
  const int before = dev.allocs;
  void* q = a.allocate(size_t(1) << 20, kStreamA, "q");
  EXPECT_NE(q, big);
  EXPECT_EQ(dev.allocs, before + 1);
  // 4 MiB: big is exactly twice as large, which is still allowed.
  void* r = a.allocate(size_t(4) << 20, kStreamA, "r");
  EXPECT_EQ(r, big);
  EXPECT_EQ(a.stats().cache_hits, 2u);
  a.free(p);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, ReleasesTheCacheAndRetriesWhenTheDeviceIsFull) {
  FakeDevice dev;
  dev.capacity = size_t(10) << 20;
  CachingAllocator a(dev.source(), "fake:0");
  void* p = a.allocate(size_t(6) << 20, kStreamA, "activations");
  a.free(p);  // cached: the device still holds 6 MiB
  // 8 MiB does not fit next to the cached 6 MiB, and the cached block is too small: release, retry.
  void* q = a.allocate(size_t(8) << 20, kStreamB, "logits");
  ASSERT_NE(q, nullptr);
  const auto s = a.stats();
  EXPECT_EQ(s.oom_releases, 1u);
  EXPECT_EQ(s.source_frees, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(dev.live.size(), 1u);
  a.free(q);
}

TEST(CachingAllocator, OutOfMemoryNamesTheBytesAndTheCaller) {
  FakeDevice dev;
  dev.capacity = size_t(4) << 20;
  CachingAllocator a(dev.source(), "cuda:3");
  try {
    a.allocate(size_t(5) << 20, kStreamA, "the logits of 8 x 1024 tokens");
    FAIL() << "expected DeviceOutOfMemory";
  } catch (const DeviceOutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(
        m.find("out of GPU memory allocating 5242880 bytes for the logits of 8 x 1024 tokens"),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("cuda:3"), std::string::npos) << m;
  }
  // A UserError: the CLI prints it as one line and exits 2.
  EXPECT_THROW(a.allocate(size_t(5) << 20, kStreamA, "x"), UserError);
}

TEST(CachingAllocator, TracksPeakOwnershipAndReturnsEverythingOnDestruction) {
  FakeDevice dev;
  {
    CachingAllocator a(dev.source(), "fake:0");
    void* p = a.allocate(100, kStreamA, "p");
    void* q = a.allocate(size_t(3) << 20, kStreamA, "q");
    EXPECT_TRUE(a.owns(p));
    EXPECT_FALSE(a.owns(reinterpret_cast<void*>(0x1)));
    EXPECT_EQ(a.stats().peak_live_bytes, 512u + (size_t(4) << 20));
    a.free(p);
    EXPECT_FALSE(a.owns(p));
    EXPECT_THROW(a.free(p), std::logic_error);  // double free is a bug, caught
    EXPECT_EQ(a.stats().peak_live_bytes, 512u + (size_t(4) << 20));
    EXPECT_EQ(a.release_cached(), 512u);
    a.free(q);
  }
  EXPECT_TRUE(dev.live.empty());
  EXPECT_EQ(dev.allocs, dev.frees);
}

TEST(GemmPlan, MapsRowMajorToColumnMajor) {
  // out[M,N] = a[M,K] b[K,N]: cuBLAS computes out^T = b^T a^T with A = b (N x K, ld N).
  cuda::LtProblem p = cuda::map_row_major(37, 45, 129, false, false);
  EXPECT_EQ(p.m, 45u);
  EXPECT_EQ(p.n, 37u);
  EXPECT_EQ(p.k, 129u);
  EXPECT_FALSE(p.trans_a);
  EXPECT_FALSE(p.trans_b);
  EXPECT_EQ(p.a_rows, 45u);
  EXPECT_EQ(p.a_cols, 129u);
  EXPECT_EQ(p.lda, 45);
  EXPECT_EQ(p.b_rows, 129u);
  EXPECT_EQ(p.b_cols, 37u);
  EXPECT_EQ(p.ldb, 129);
  EXPECT_EQ(p.ldc, 45);
  // Both transposed: a stored [K,M], b stored [N,K].
  p = cuda::map_row_major(37, 45, 129, true, true);
  EXPECT_TRUE(p.trans_a);  // cuBLAS A is our b, transposed because b is
  EXPECT_TRUE(p.trans_b);
  EXPECT_EQ(p.a_rows, 129u);
  EXPECT_EQ(p.a_cols, 45u);
  EXPECT_EQ(p.lda, 129);
  EXPECT_EQ(p.b_rows, 37u);
  EXPECT_EQ(p.b_cols, 129u);
  EXPECT_EQ(p.ldb, 37);
  // Empty problems still have valid leading dimensions.
  p = cuda::map_row_major(0, 0, 0, false, false);
  EXPECT_GE(p.lda, 1);
  EXPECT_GE(p.ldb, 1);
  EXPECT_GE(p.ldc, 1);
}

// The column-major mapping, checked numerically: a naive column-major GEMM fed the mapped
// problem reproduces the row-major product for every transpose combination.
TEST(GemmPlan, MappingComputesTheRowMajorProduct) {
  const int64_t M = 5, N = 7, K = 3;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<float> a(M * K), b(K * N);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 7 % 11) - 5);
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i * 5 % 13) - 6);
    auto A = [&](int64_t i, int64_t k) { return ta ? a[k * M + i] : a[i * K + k]; };
    auto B = [&](int64_t k, int64_t j) { return tb ? b[j * K + k] : b[k * N + j]; };
    const cuda::LtProblem p = cuda::map_row_major(M, N, K, ta, tb);
    // Column-major: element (r, c) of a stored matrix with leading dimension ld is at c*ld + r.
    auto lt_a = [&](uint64_t r, uint64_t c) {  // op(A) (m x k) from our b
      return p.trans_a ? b[r * p.lda + c] : b[c * p.lda + r];
    };
    auto lt_b = [&](uint64_t r, uint64_t c) {  // op(B) (k x n) from our a
      return p.trans_b ? a[r * p.ldb + c] : a[c * p.ldb + r];
    };
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float want = 0, got = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += A(i, k) * B(k, j);
          got += lt_a(uint64_t(j), uint64_t(k)) * lt_b(uint64_t(k), uint64_t(i));
        }
        // D (m x n, ld ldc) column-major at (j, i) is out[i][j] row-major.
        EXPECT_EQ(want, got) << "trans " << ta << tb << " at " << i << "," << j;
      }
  }
}

TEST(GemmPlan, AlignmentAndKeys) {
  EXPECT_EQ(cuda::pointer_alignment(0x1000), 256u);
  EXPECT_EQ(cuda::pointer_alignment(0x1004), 4u);
  EXPECT_EQ(cuda::pointer_alignment(0x1010), 16u);
  EXPECT_EQ(cuda::pointer_alignment(0x1080), 128u);
  EXPECT_EQ(cuda::pointer_alignment(0), 256u);

  cuda::GemmKey a;
  a.p = cuda::map_row_major(37, 45, 129, false, true);
  a.align_a = a.align_b = a.align_c = 256;
  cuda::GemmKey b = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(cuda::GemmKeyHash{}(a), cuda::GemmKeyHash{}(b));
  // Every field that changes the heuristic's answer changes the key.
  std::vector<cuda::GemmKey> variants(10, a);
  variants[0].p = cuda::map_row_major(38, 45, 129, false, true);
  variants[1].p = cuda::map_row_major(37, 45, 129, true, true);
  variants[2].operands = cuda::GemmOperands::bf16;
  variants[3].bias = true;
  variants[4].align_a = 16;
  variants[5].align_b = 4;
  variants[6].align_c = 8;
  variants[7].epilogue = cuda::GemmEpilogue::gelu_aux;  // the MLP's fused GELU
  variants[8].epilogue = cuda::GemmEpilogue::dgelu;
  variants[9].align_aux = 16;
  std::unordered_set<size_t> hashes{cuda::GemmKeyHash{}(a)};
  for (const auto& v : variants) {
    EXPECT_FALSE(v == a) << v.str();
    hashes.insert(cuda::GemmKeyHash{}(v));
  }
  EXPECT_EQ(hashes.size(), variants.size() + 1);
  EXPECT_NE(variants[2].str().find("bf16"), std::string::npos);
  EXPECT_NE(variants[7].str().find("gelu"), std::string::npos);
  EXPECT_NE(variants[8].str().find("dgelu"), std::string::npos);
}

TEST(LaunchGeometry, GridsCoverAndStayBounded) {
  using namespace llmrun::kernels;
  EXPECT_EQ(grid_blocks(0), 1);
  EXPECT_EQ(grid_blocks(1), 1);
  EXPECT_EQ(grid_blocks(256), 1);
  EXPECT_EQ(grid_blocks(257), 2);
  EXPECT_EQ(grid_blocks(int64_t(1) << 40), kMaxGridBlocks);
  EXPECT_EQ(grid_blocks(1000, 100), 10);
  // A grid-stride loop over n with grid_blocks(n) blocks visits every index exactly once.
  for (int64_t n : {1, 255, 256, 257, 4097, 100003}) {
    const int64_t stride = int64_t(grid_blocks(n)) * kBlockThreads;
    std::vector<int> seen(size_t(n), 0);
    for (int64_t start = 0; start < stride; ++start)
      for (int64_t i = start; i < n; i += stride) ++seen[size_t(i)];
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[size_t(i)], 1) << n << " " << i;
  }
  EXPECT_EQ(row_groups(0), 1);
  EXPECT_EQ(row_groups(1), 1);
  EXPECT_EQ(row_groups(kRowsPerGroup), 1);
  EXPECT_EQ(row_groups(kRowsPerGroup + 1), 2);
  EXPECT_EQ(column_reduce_workspace_bytes(37, 129, 2), 1u * 129 * 2 * sizeof(double));
  EXPECT_EQ(column_reduce_workspace_bytes(8192, 768, 1), 128u * 768 * sizeof(double));
  EXPECT_EQ(reduce_workspace_bytes(), kReduceBlocks * sizeof(double));
  // A reduction launches only the blocks of its fixed grid that see an element.
  EXPECT_EQ(reduce_blocks_used(0), 1);
  EXPECT_EQ(reduce_blocks_used(1), 1);
  EXPECT_EQ(reduce_blocks_used(kBlockThreads), 1);
  EXPECT_EQ(reduce_blocks_used(kBlockThreads + 1), 2);
  EXPECT_EQ(reduce_blocks_used(int64_t(kReduceBlocks) * kBlockThreads), kReduceBlocks);
  EXPECT_EQ(reduce_blocks_used(int64_t(1) << 40), kReduceBlocks);
  EXPECT_EQ(kBlockThreads % 32, 0);
  EXPECT_EQ(kRowThreads % 32, 0);
  EXPECT_EQ(kReduceBlocks % 32, 0);  // the final reduction is one block of kReduceBlocks threads
  EXPECT_LE(kReduceBlocks, 1024);
}

TEST(DtypeDispatch, CastRoutes) {
  using cuda::CastRoute;
  EXPECT_EQ(cuda::cast_route(DType::f32, DType::f32), CastRoute::f32_scale);
  EXPECT_EQ(cuda::cast_route(DType::bf16, DType::f32), CastRoute::f32_to_bf16);
  EXPECT_EQ(cuda::cast_route(DType::f16, DType::f32), CastRoute::f32_to_f16);
  EXPECT_EQ(cuda::cast_route(DType::f32, DType::bf16), CastRoute::bf16_to_f32);
  EXPECT_EQ(cuda::cast_route(DType::f32, DType::f16), CastRoute::f16_to_f32);
  EXPECT_EQ(cuda::cast_route(DType::bf16, DType::f16), CastRoute::unsupported);
  EXPECT_EQ(cuda::cast_route(DType::i32, DType::f32), CastRoute::unsupported);
  EXPECT_EQ(cuda::cast_route(DType::f32, DType::fp8_e4m3), CastRoute::unsupported);
}

TEST(DtypeDispatch, FillPatterns) {
  cuda::FillPattern f = cuda::fill_pattern(DType::f32, 1.0f);
  EXPECT_EQ(f.bytes, 4);
  EXPECT_EQ(f.bits, 0x3f800000u);
  f = cuda::fill_pattern(DType::i32, -3.0f);
  EXPECT_EQ(f.bytes, 4);
  EXPECT_EQ(int32_t(f.bits), -3);
  f = cuda::fill_pattern(DType::bf16, 1.0f);
  EXPECT_EQ(f.bytes, 2);
  EXPECT_EQ(f.bits, 0x3f80u);
  f = cuda::fill_pattern(DType::f16, 1.0f);
  EXPECT_EQ(f.bytes, 2);
  EXPECT_EQ(f.bits, 0x3c00u);
  // bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 -> 1.
  EXPECT_EQ(cuda::fill_pattern(DType::bf16, 1.00390625f).bits, 0x3f80u);
  EXPECT_EQ(cuda::fill_pattern(DType::fp8_e4m3, 1.0f).bytes, 0);
}

}  // namespace
