#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "temp_dir.h"

using namespace llmrun;
using llmrun::testing::read_text;
using llmrun::testing::TempDir;
using llmrun::testing::write_text;

namespace {

// The error must be a UserError naming the file and containing `needle`.
template <class F>
void expect_user_error(F&& f, const std::filesystem::path& file, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected UserError containing: " << needle;
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

// A file with the given header text and `data_bytes` zero bytes of data.
void write_raw(const std::filesystem::path& p, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  write_text(p, bytes + header + std::string(data_bytes, '\0'));
}

}  // namespace

TEST(Safetensors, RoundTripAllDtypes) {
  TempDir tmp;
  const std::vector<float> f32 = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, -5.0f};
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(8.0f)};
  const std::vector<uint16_t> f16 = {f32_to_f16(0.125f), f32_to_f16(-3.0f)};
  const std::vector<int32_t> i32 = {7, -8, 9, 10};
  const std::vector<uint8_t> e4m3 = {0x38, 0x40, 0xC0};
  const std::vector<uint8_t> e5m2 = {0x3C, 0x7B};

  SafetensorsWriter w;
  w.add("w.f32", DType::f32, {2, 3}, f32.data());
  w.add("w.bf16", DType::bf16, {3}, bf16.data());
  w.add("w.f16", DType::f16, {1, 2}, f16.data());
  w.add("w.i32", DType::i32, {2, 2}, i32.data());
  w.add("w.e4m3", DType::fp8_e4m3, {3}, e4m3.data());
  w.add("w.e5m2", DType::fp8_e5m2, {2}, e5m2.data());
  w.add("empty", DType::f32, {0, 4}, nullptr);
  w.set_metadata({{"format", "pt"}, {"step", "12"}});
  const auto path = tmp / "model.safetensors";
  w.write(path);

  // Header length is a multiple of 8 so the data section is aligned.
  const std::string raw = read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const auto header = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(header["w.bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["w.e4m3"]["dtype"], "F8_E4M3");
  EXPECT_EQ(header["w.f32"]["data_offsets"], nlohmann::json({0, 24}));
  // Widest types first, so every tensor starts at a multiple of its element size.
  EXPECT_EQ(header["w.i32"]["data_offsets"], nlohmann::json({24, 40}));
  EXPECT_EQ(header["w.bf16"]["data_offsets"], nlohmann::json({40, 46}));
  EXPECT_EQ(header["w.e5m2"]["data_offsets"], nlohmann::json({53, 55}));

  SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"empty", "w.bf16", "w.e4m3", "w.e5m2", "w.f16",
                                                 "w.f32", "w.i32"}));
  EXPECT_EQ(f.metadata().at("step"), "12");
  EXPECT_TRUE(f.has("w.i32"));
  EXPECT_FALSE(f.has("nope"));

  auto same_bytes = [&](const char* name, const void* want, size_t bytes, DType dt) {
    const SafetensorsTensor& t = f.info(name);
    ASSERT_TRUE(t.dtype.has_value()) << name;
    EXPECT_EQ(*t.dtype, dt) << name;
    ASSERT_EQ(t.bytes, bytes) << name;
    EXPECT_EQ(std::memcmp(t.data, want, bytes), 0) << name;
  };
  same_bytes("w.f32", f32.data(), 24, DType::f32);
  same_bytes("w.bf16", bf16.data(), 6, DType::bf16);
  same_bytes("w.f16", f16.data(), 4, DType::f16);
  same_bytes("w.i32", i32.data(), 16, DType::i32);
  same_bytes("w.e4m3", e4m3.data(), 3, DType::fp8_e4m3);
  same_bytes("w.e5m2", e5m2.data(), 2, DType::fp8_e5m2);
  EXPECT_EQ(f.info("w.f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.info("w.f32").dtype_tag, "F32");
  EXPECT_EQ(f.info("empty").numel(), 0);

  std::vector<float> out(6);
  f.read_f32("w.f32", out.data(), 6);
  EXPECT_EQ(out, f32);
  f.read_f32("w.bf16", out.data(), 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[2], 8.0f);
  f.read_f32("w.f16", Tensor(out.data(), DType::f32, {1, 2}));
  EXPECT_EQ(out[0], 0.125f);
  EXPECT_EQ(out[1], -3.0f);
  expect_user_error([&] { f.read_f32("w.i32", out.data(), 4); }, path, "has dtype I32");
  expect_user_error([&] { f.info("nope"); }, path, "no tensor named nope");
}

TEST(Safetensors, ConvertsF32ToHalfWhileWriting) {
  TempDir tmp;
  std::vector<float> src = {1.0f, 1.0f + 1.0f / 256, -3.140625f, 65504.0f, 1e-3f};
  const Tensor t(src.data(), DType::f32, {5});
  SafetensorsWriter w;
  w.add("as_bf16", t, DType::bf16);
  w.add("as_f16", t, DType::f16);
  w.add("as_f32", t, DType::f32);
  const auto path = tmp / "half.safetensors";
  w.write(path);

  SafetensorsFile f(path);
  EXPECT_EQ(f.info("as_bf16").dtype_tag, "BF16");
  EXPECT_EQ(f.info("as_bf16").bytes, 10u);
  EXPECT_EQ(f.info("as_f16").dtype_tag, "F16");
  std::vector<uint16_t> stored(5);
  std::memcpy(stored.data(), f.info("as_bf16").data, 10);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(stored[i], f32_to_bf16(src[i])) << i;
  std::memcpy(stored.data(), f.info("as_f16").data, 10);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(stored[i], f32_to_f16(src[i])) << i;

  std::vector<float> out(5);
  f.read_f32("as_bf16", out.data(), 5);
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(out[i], bf16_to_f32(f32_to_bf16(src[i])));
  f.read_f32("as_f32", out.data(), 5);
  EXPECT_EQ(out, src);
}

TEST(Safetensors, ConversionStreamsLargeTensors) {
  TempDir tmp;
  std::vector<float> src(200000);  // more than one conversion chunk
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 256) * 0.5f;
  SafetensorsWriter w;
  w.add("big", Tensor(src.data(), DType::f32, {400, 500}), DType::bf16);
  w.write(tmp / "big.safetensors");
  SafetensorsFile f(tmp / "big.safetensors");
  std::vector<float> out(src.size());
  f.read_f32("big", Tensor(out.data(), DType::f32, {400, 500}));
  EXPECT_EQ(out, src);  // multiples of 0.5 below 128 fit bf16's 8 significant bits
}

TEST(Safetensors, WrongShapeOnReadNamesBothShapes) {
  TempDir tmp;
  std::vector<float> v(6, 1.0f);
  SafetensorsWriter w;
  w.add("wte", DType::f32, {2, 3}, v.data());
  const auto path = tmp / "m.safetensors";
  w.write(path);
  SafetensorsFile f(path);
  std::vector<float> out(8);
  expect_user_error(
      [&] {
        f.read_f32("wte", Tensor(out.data(), DType::f32, {3, 2}));
      },
      path, "tensor wte has shape [2, 3], expected [3, 2]");
  expect_user_error([&] { f.read_f32("wte", out.data(), 8); }, path,
                    "tensor wte has shape [2, 3] (6 elements), expected 8 elements");
}

TEST(Safetensors, TruncatedFileIsRejected) {
  TempDir tmp;
  std::vector<float> v(64, 2.0f);
  SafetensorsWriter w;
  w.add("a", DType::f32, {64}, v.data());
  const auto good = tmp / "good.safetensors";
  w.write(good);
  const std::string bytes = read_text(good);

  const auto cut_data = tmp / "cut_data.safetensors";
  write_text(cut_data, bytes.substr(0, bytes.size() - 10));
  expect_user_error([&] { SafetensorsFile f(cut_data); }, cut_data, "outside the data section");

  const auto cut_header = tmp / "cut_header.safetensors";
  write_text(cut_header, bytes.substr(0, 20));
  expect_user_error([&] { SafetensorsFile f(cut_header); }, cut_header, "truncated");

  const auto tiny = tmp / "tiny.safetensors";
  write_text(tiny, bytes.substr(0, 5));
  expect_user_error([&] { SafetensorsFile f(tiny); }, tiny, "too short");
}

TEST(Safetensors, HeaderValidation) {
  TempDir tmp;
  auto p = tmp / "bad.safetensors";

  write_raw(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], ", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "safetensors header: invalid JSON");

  write_raw(p, "[1, 2]", 0);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "not a JSON object");

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "outside the data section");

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "needs 12");

  write_raw(p, R"({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "unknown dtype");

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "shape");

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "data_offsets must be [begin, end]");

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "outside the data section");

  write_raw(p,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            12);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "tensors a and b overlap");

  write_raw(p, R"({"__metadata__": {"n": 3}})", 0);
  expect_user_error([&] { SafetensorsFile f(p); }, p, "__metadata__.n is not a string");

  std::string huge(8, '\0');
  huge[4] = 1;  // 2^32 bytes of header
  write_text(p, huge + "{}");
  expect_user_error([&] { SafetensorsFile f(p); }, p, "over 100 MB");

  const auto missing = tmp / "missing.safetensors";
  expect_user_error([&] { SafetensorsFile f(missing); }, missing, "No such file");
}

TEST(Safetensors, AcceptsForeignDtypesAndPadding) {
  TempDir tmp;
  auto p = tmp / "foreign.safetensors";
  // An I64 buffer (as some Hugging Face files carry) opens; it just has no DType.
  write_raw(p, R"({"pos": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}    )", 16);
  SafetensorsFile f(p);
  EXPECT_EQ(f.info("pos").dtype_tag, "I64");
  EXPECT_FALSE(f.info("pos").dtype.has_value());
  std::vector<float> out(2);
  expect_user_error([&] { f.read_f32("pos", out.data(), 2); }, p, "has dtype I64");
}
