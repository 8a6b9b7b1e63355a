// ckpt/huge_page_params: an inference model's fp32 parameter buckets in the weight arena's
// huge-page mappings (VmFlags "hg" in /proc/self/smaps), zeroed, and a model on them computing
// bitwise what the same model on Backend::allocate'd buckets computes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "ckpt/huge_page_params.h"
#include "model/transformer.h"
#include "tiny_model.h"

namespace llmrun {
namespace {

// The VmFlags line of the /proc/self/smaps mapping holding p ("" when none does).
std::string vm_flags(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' '))
      inside = lo <= a && a < hi;
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

std::vector<float> logits_of(Transformer& model) {
  const int vocab = model.config().vocab;
  std::vector<float> out(static_cast<size_t>(vocab), 0.0f);
  KvCache cache = model.make_cache(8);
  const int32_t tokens[] = {3, 1, 4, 1, 5};
  model.forward_cached(tokens, 5, cache, Tensor(out.data(), DType::f32, {vocab}));
  return out;
}

TEST(HugePageParams, BucketsLiveInHugePagesAndComputeAsAllocatedOnes) {
  auto be = make_backend(BackendKind::cpu, 1);
  const ModelConfig cfg = test_models::tiny_config(Arch::gpt2, 32, 64, 256, 64);
  Transformer plain(*be, cfg);
  plain.init_weights(7);

  StoreOptions stores;
  stores.allocate_params = false;
  Transformer model(*be, cfg, stores);
  const std::shared_ptr<void> keep = attach_huge_page_params(model.params());
  ASSERT_TRUE(keep);
  for (int b = 0; b < model.params().num_buckets(); ++b) {
    ASSERT_TRUE(model.params().resident(b)) << "bucket " << b;
    const Tensor t = model.params().bucket(b);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.f32()[i], 0.0f) << "bucket " << b;
    if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
      EXPECT_NE(vm_flags(t.data).find(" hg"), std::string::npos)
          << "bucket " << b << " is not advised for huge pages: " << vm_flags(t.data);
    }
  }
  // the check tells the two apart: Backend::allocate's mappings carry no huge-page advice
  EXPECT_EQ(vm_flags(plain.params().bucket(0).data).find(" hg"), std::string::npos);
  model.init_weights(7);
  const std::vector<float> want = logits_of(plain), got = logits_of(model);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

}  // namespace
}  // namespace llmrun
