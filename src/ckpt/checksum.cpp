#include "ckpt/checksum.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace llmrun {

namespace {

constexpr uint64_t P1 = 11400714785074694791ull;
constexpr uint64_t P2 = 14029467366897019727ull;
constexpr uint64_t P3 = 1609587929392839161ull;
constexpr uint64_t P4 = 9650029242287828579ull;
constexpr uint64_t P5 = 2870177450012600261ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only (the safetensors writer asserts it)
  return v;
}

inline uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}

inline uint64_t merge(uint64_t h, uint64_t acc) {
  h ^= round(0, acc);
  return h * P1 + P4;
}

}  // namespace

Xxh64::Xxh64() : acc_{P1 + P2, P2, 0, 0ull - P1} {}

void Xxh64::update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, 32 - buffered_);
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    bytes -= take;
    if (buffered_ < 32) return;
    for (int i = 0; i < 4; ++i) acc_[i] = round(acc_[i], load64(buf_ + 8 * i));
    buffered_ = 0;
  }
  // The four lanes are independent, so the compiler keeps them in registers.
  uint64_t a = acc_[0], b = acc_[1], c = acc_[2], d = acc_[3];
  while (bytes >= 32) {
    a = round(a, load64(p));
    b = round(b, load64(p + 8));
    c = round(c, load64(p + 16));
    d = round(d, load64(p + 24));
    p += 32;
    bytes -= 32;
  }
  acc_[0] = a, acc_[1] = b, acc_[2] = c, acc_[3] = d;
  std::memcpy(buf_, p, bytes);
  buffered_ = bytes;
}

void Xxh64::update_copy(void* dst, const void* src, size_t bytes) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
  // Top up a partial stripe through the buffering path, then stream whole stripes.
  if (buffered_ > 0) {
    const size_t take = std::min(bytes, 32 - buffered_);
    std::memcpy(out, p, take);
    update(p, take);
    out += take, p += take, bytes -= take;
    if (bytes == 0) return;
  }
  total_ += bytes;
  uint64_t a = acc_[0], b = acc_[1], c = acc_[2], d = acc_[3];
  while (bytes >= 32) {
    const uint64_t w0 = load64(p), w1 = load64(p + 8), w2 = load64(p + 16), w3 = load64(p + 24);
    std::memcpy(out, &w0, 8);
    std::memcpy(out + 8, &w1, 8);
    std::memcpy(out + 16, &w2, 8);
    std::memcpy(out + 24, &w3, 8);
    a = round(a, w0);
    b = round(b, w1);
    c = round(c, w2);
    d = round(d, w3);
    p += 32, out += 32, bytes -= 32;
  }
  acc_[0] = a, acc_[1] = b, acc_[2] = c, acc_[3] = d;
  std::memcpy(out, p, bytes);
  std::memcpy(buf_, p, bytes);
  buffered_ = bytes;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge(h, acc_[i]);
  } else {
    h = P5;  // seed 0
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t n = buffered_;
  while (n >= 8) {
    h ^= round(0, load64(p));
    h = rotl(h, 27) * P1 + P4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= uint64_t(load32(p)) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= uint64_t(*p) * P5;
    h = rotl(h, 11) * P1;
    ++p;
    --n;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t bytes) {
  Xxh64 h;
  h.update(data, bytes);
  return h.digest();
}

std::string checksum_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace llmrun
