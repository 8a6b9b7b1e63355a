// lora_host_delta: the CPU kernel of a row group's LoRA delta (see the header).
#include "serve/lora_delta.h"

#include <algorithm>
#include <cstring>

namespace llmrun {

namespace {

// 16 floats: one AVX-512 register, two AVX2 ones; GCC lowers the element-wise arithmetic to
// whatever -march offers without changing its per-lane results.
typedef float Lanes __attribute__((vector_size(64)));
static_assert(sizeof(Lanes) == kLoraLanes * sizeof(float));

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The first n floats (the rest zero): a y block at the end of a target's columns.
inline Lanes load(const float* p, int n) {
  if (n == int(kLoraLanes)) return load(p);
  Lanes v = {};
  for (int l = 0; l < n; ++l) v[l] = p[l];
  return v;
}

inline void store(float* p, Lanes v, int n) {
  if (n == int(kLoraLanes)) {
    std::memcpy(p, &v, sizeof v);
    return;
  }
  for (int l = 0; l < n; ++l) p[l] = v[l];
}

// u[i, 0 .. NB*16) = x[i] A^T over one A^T panel [in, NB*16] for MR rows: u[i][c] sums
// x[i][k] * At[k][c] in k order. u: the panel's first column of row 0 (rows wpad apart).
template <int MR, int NB>
void a_tile(const float* x, int64_t in, const float* panel, float* u, int64_t wpad) {
  constexpr int64_t pw = NB * kLoraLanes;
  Lanes acc[MR][NB] = {};
  for (int64_t k = 0; k < in; ++k) {
    Lanes a[NB];
    for (int b = 0; b < NB; ++b) a[b] = load(panel + k * pw + b * kLoraLanes);
    for (int i = 0; i < MR; ++i) {
      const float xi = x[i * in + k];  // a scalar operand is broadcast to every lane
      for (int b = 0; b < NB; ++b) acc[i][b] += xi * a[b];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) store(u + i * wpad + b * kLoraLanes, acc[i][b], kLoraLanes);
}

template <int MR>
void a_panel(const float* x, int64_t in, const float* panel, int64_t pw, float* u, int64_t wpad) {
  switch (pw / kLoraLanes) {
    case 4:
      return a_tile<MR, 4>(x, in, panel, u, wpad);
    case 3:
      return a_tile<MR, 3>(x, in, panel, u, wpad);
    case 2:
      return a_tile<MR, 2>(x, in, panel, u, wpad);
    default:
      return a_tile<MR, 1>(x, in, panel, u, wpad);
  }
}

struct BOperands {
  const float* u;  // [MR, wpad], this target's slice at u_begin
  int64_t wpad, rank;
  float* y;  // this panel's first column of row 0
  int64_t y_cols;
};

// y[i][0 .. NB*16) += u[i] (scale B)^T over one B^T panel [rank, NB*16] for MR rows: y[i][c]
// adds u[i][j] * Bt[j][c] to itself in j order. cols: the panel's columns that are y's (the
// last vector may cover fewer than 16).
template <int MR, int NB>
void b_tile(const BOperands& o, const float* panel, int64_t cols) {
  constexpr int64_t pw = NB * kLoraLanes;
  Lanes acc[MR][NB];
  int n[NB];
  for (int b = 0; b < NB; ++b) n[b] = int(std::min<int64_t>(kLoraLanes, cols - b * kLoraLanes));
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) acc[i][b] = load(o.y + i * o.y_cols + b * kLoraLanes, n[b]);
  for (int64_t j = 0; j < o.rank; ++j) {
    Lanes w[NB];
    for (int b = 0; b < NB; ++b) w[b] = load(panel + j * pw + b * kLoraLanes);
    for (int i = 0; i < MR; ++i) {
      const float ui = o.u[i * o.wpad + j];
      for (int b = 0; b < NB; ++b) acc[i][b] += ui * w[b];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int b = 0; b < NB; ++b) store(o.y + i * o.y_cols + b * kLoraLanes, acc[i][b], n[b]);
}

template <int MR>
void rows_tile(const LoraHostSite& s, const float* x, float* y, int64_t y_cols, float* u) {
  const int64_t wpad = lora_pad(s.width);
  const float* at = s.packed.data();
  for (int64_t c = 0; c < wpad; c += kLoraAPanel)
    a_panel<MR>(x, s.in, at + s.in * c, std::min(kLoraAPanel, wpad - c), u + c, wpad);
  for (const LoraHostTarget& t : s.targets) {
    const float* bt = s.packed.data() + t.b_offset;
    const int64_t cpad = lora_pad(t.cols);
    for (int64_t c = 0; c < cpad; c += kLoraBPanel) {
      const BOperands o{u + t.u_begin, wpad, s.rank, y + t.col_begin + c, y_cols};
      const float* panel = bt + s.rank * c;
      if (cpad - c >= 2 * kLoraLanes)
        b_tile<MR, 2>(o, panel, t.cols - c);
      else
        b_tile<MR, 1>(o, panel, t.cols - c);
    }
  }
}

// dst gets the [rows, width] matrix value(r, c) (zero for c >= cols) in panels of P columns.
template <typename Value>
void pack_panels(float* dst, int64_t rows, int64_t cols, int64_t width, int64_t P, Value value) {
  for (int64_t c0 = 0; c0 < width; c0 += P) {
    const int64_t pw = std::min(P, width - c0);
    float* panel = dst + rows * c0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < pw; ++c) panel[r * pw + c] = c0 + c < cols ? value(r, c0 + c) : 0.0f;
  }
}

}  // namespace

LoraHostSite lora_pack_site(int64_t in, int64_t rank, const float* a,
                            const std::vector<LoraTargetSource>& targets, float scale) {
  LoraHostSite s;
  s.in = in;
  s.rank = rank;
  s.width = int64_t(targets.size()) * rank;
  const int64_t wpad = lora_pad(s.width);
  int64_t size = in * wpad;
  for (size_t t = 0; t < targets.size(); ++t) {
    const LoraTargetSource& src = targets[t];
    s.targets.push_back({src.col_begin, src.cols, int64_t(t) * rank, size});
    size += rank * lora_pad(src.cols);
  }
  s.packed.assign(size_t(size), 0.0f);
  const int64_t width = s.width;
  pack_panels(s.packed.data(), in, width, wpad, kLoraAPanel,
              [&](int64_t k, int64_t c) { return a[c * in + k]; });
  for (size_t t = 0; t < targets.size(); ++t) {
    const float* b = targets[t].b;
    pack_panels(s.packed.data() + s.targets[t].b_offset, rank, targets[t].cols,
                lora_pad(targets[t].cols), kLoraBPanel,
                [&](int64_t j, int64_t c) { return scale * b[c * rank + j]; });
  }
  return s;
}

int64_t LoraHostSite::macs_per_row() const {
  int64_t n = in * width;
  for (const LoraHostTarget& t : targets) n += rank * t.cols;
  return n;
}

void lora_host_delta(const LoraHostSite& site, const float* x, int64_t rows, float* y,
                     int64_t y_cols, float* u) {
  for (int64_t i = 0; i < rows; i += kLoraTileRows) {
    const float* xi = x + i * site.in;
    float* yi = y + i * y_cols;
    switch (std::min<int64_t>(kLoraTileRows, rows - i)) {
      case 4:
        rows_tile<4>(site, xi, yi, y_cols, u);
        break;
      case 3:
        rows_tile<3>(site, xi, yi, y_cols, u);
        break;
      case 2:
        rows_tile<2>(site, xi, yi, y_cols, u);
        break;
      default:
        rows_tile<1>(site, xi, yi, y_cols, u);
    }
  }
}

}  // namespace llmrun
