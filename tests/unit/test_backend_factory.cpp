// The backend factory (launch.backend / --backend) and the device-emulating test backend that
// proves the layers above src/backend never touch device memory from the host.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "backend/backend_factory.h"
#include "util/error.h"

using namespace llmrun;

namespace {
// Sets LLMRUN_TEST_BACKEND for one scope.
struct TestBackendEnv {
  std::string old;
  bool had;
  explicit TestBackendEnv(const char* value) : had(std::getenv("LLMRUN_TEST_BACKEND") != nullptr) {
    if (had) old = std::getenv("LLMRUN_TEST_BACKEND");
    setenv("LLMRUN_TEST_BACKEND", value, 1);
  }
  ~TestBackendEnv() {
    if (had)
      setenv("LLMRUN_TEST_BACKEND", old.c_str(), 1);
    else
      unsetenv("LLMRUN_TEST_BACKEND");
  }
};
}  // namespace

TEST(BackendFactory, ParsesKindsAndRefusesOthers) {
  EXPECT_EQ(parse_backend_kind("auto"), BackendKind::automatic);
  EXPECT_EQ(parse_backend_kind("cpu"), BackendKind::cpu);
  EXPECT_EQ(parse_backend_kind("cuda"), BackendKind::cuda);
  EXPECT_THROW(parse_backend_kind("gpu"), UserError);
  EXPECT_EQ(built_backends().front(), "cpu");
}

TEST(BackendFactory, CpuAndAutoWithoutCuda) {
  TestBackendEnv env("cpu");
  EXPECT_EQ(make_backend(BackendKind::cpu, 1)->name(), "cpu");
  const bool cuda_built = built_backends().size() > 1;
  if (!cuda_built) {
    EXPECT_EQ(make_backend(BackendKind::automatic, 1)->name(), "cpu");
    try {
      make_backend(BackendKind::cuda, 1);
      FAIL() << "cuda without a CUDA build";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
  }
}

TEST(DeviceMemory, HostAccessorsRefuseDeviceTensors) {
  float x[4] = {};
  Tensor t(x, DType::f32, {4}, Device::cuda);
  EXPECT_THROW(t.f32(), std::logic_error);
  int32_t ids[2] = {};
  EXPECT_THROW(Tensor(ids, DType::i32, {2}, Device::cuda).i32(), std::logic_error);
  EXPECT_EQ(Tensor(x, DType::f32, {4}).f32(), x);
}

TEST(DeviceMemory, EmulatedDeviceKeepsItsMemoryFromTheHostAndComputesLikeTheCpu) {
  TestBackendEnv env("emulated-device");
  auto dev = make_backend(BackendKind::cpu, 1);
  auto cpu = make_cpu_backend(1);
  ASSERT_EQ(dev->name(), "emulated-device");
  EXPECT_EQ(dev->device(), Device::cuda);
  const int64_t m = 5, k = 7, n = 3;
  std::vector<float> a(size_t(m * k)), b(size_t(k * n)), want(size_t(m * n)), got(size_t(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * float(i) - 1.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.3f - 0.05f * float(i);
  Buffer da = dev->allocate(a.size() * 4), db = dev->allocate(b.size() * 4),
         dc = dev->allocate(want.size() * 4);
  const Tensor ta = da.as(DType::f32, {m, k}), tb = db.as(DType::f32, {k, n}),
               tc = dc.as(DType::f32, {m, n});
  EXPECT_EQ(ta.device, Device::cuda);
  EXPECT_THROW(ta.f32(), std::logic_error);  // the host may not read device memory
  dev->copy(ta, Tensor(a.data(), DType::f32, {m, k}));
  dev->copy(tb, Tensor(b.data(), DType::f32, {k, n}));
  dev->matmul(tc, ta, tb, false, false);
  dev->copy(Tensor(got.data(), DType::f32, {m, n}), tc);
  cpu->matmul(Tensor(want.data(), DType::f32, {m, n}), Tensor(a.data(), DType::f32, {m, k}),
              Tensor(b.data(), DType::f32, {k, n}), false, false);
  EXPECT_EQ(got, want);
  // A compute op given host memory is a bug in the caller, as on a real device.
  EXPECT_THROW(dev->matmul(tc, Tensor(a.data(), DType::f32, {m, k}), tb, false, false),
               std::logic_error);
  // Reductions into device scalars, read back with one copy.
  Buffer ds = dev->allocate(4);
  const Tensor s = ds.as(DType::f32, {1});
  dev->sum_squares_into(s, ta);
  float host_s = 0;
  dev->copy(Tensor(&host_s, DType::f32, {1}), s);
  EXPECT_FLOAT_EQ(host_s, float(cpu->sum_squares(Tensor(a.data(), DType::f32, {m * k}))));
}
