// Dumps llmrun's FP8 casts of the fp32 values in a file, for check_fp8_casts.py to compare
// with casts it computes from the format definitions on its own.
//   fp8_cast_dump INPUT.f32 OUTDIR SCALE...
// Writes, for F in e4m3, e5m2:
//   decode_F.f32    the 256 byte patterns decoded;   reencode_F.u8  encode(decode(b))
//   encode_F.u8     the scalar encode of every input
//   quant_F_K.u8    the buffer cast of input * SCALE[K];  dequant_F_K.f32  its decode * (1 /
//   SCALE[K]) round_F_K.f32   the vectorised round trip decode(encode(input * SCALE[K])) stats.json
//   amax / overflow / underflow counts of both buffer paths per format and scale
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fp8/fp8_cast.h"

using namespace llmrun;

namespace {

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

nlohmann::json stats_json(const Fp8CastStats& s) {
  return {{"amax", s.amax != s.amax ? nlohmann::json("nan") : nlohmann::json(double(s.amax))},
          {"overflows", s.overflows},
          {"underflows", s.underflows}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s INPUT.f32 OUTDIR SCALE...\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> x(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.begin() + std::ptrdiff_t(x.size() * sizeof(float)),
            reinterpret_cast<char*>(x.data()));
  const std::string out = argv[2];
  const int64_t n = int64_t(x.size());
  nlohmann::json stats;
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const std::string name = fp8_format_name(f);
    std::vector<float> decoded(256);
    std::vector<uint8_t> reencoded(256), encoded(x.size());
    for (int b = 0; b < 256; ++b) {
      decoded[size_t(b)] = fp8_decode(uint8_t(b), f);
      reencoded[size_t(b)] = fp8_encode(decoded[size_t(b)], f);
    }
    for (size_t i = 0; i < x.size(); ++i) encoded[i] = fp8_encode(x[i], f);
    write(out + "/decode_" + name + ".f32", decoded);
    write(out + "/reencode_" + name + ".u8", reencoded);
    write(out + "/encode_" + name + ".u8", encoded);
    for (int k = 3; k < argc; ++k) {
      const float scale = std::strtof(argv[k], nullptr);
      const std::string tag = name + "_" + std::to_string(k - 3);
      std::vector<uint8_t> q(x.size());
      std::vector<float> deq(x.size()), round(x.size());
      const Fp8CastStats sq = fp8_quantize(x.data(), q.data(), n, scale, f);
      fp8_dequantize(q.data(), deq.data(), n, 1.0f / scale, f);
      const Fp8CastStats sr = fp8_round_trip(x.data(), round.data(), n, scale, f);
      write(out + "/quant_" + tag + ".u8", q);
      write(out + "/dequant_" + tag + ".f32", deq);
      write(out + "/round_" + tag + ".f32", round);
      stats[name].push_back(
          {{"scale", argv[k]}, {"quantize", stats_json(sq)}, {"round_trip", stats_json(sr)}});
    }
  }
  std::ofstream(out + "/stats.json") << stats.dump(1) << "\n";
  return 0;
}
