// Hand-written protobuf encoding of the few TensorBoard messages llmrun writes (field numbers
// from TensorFlow's event.proto / summary.proto / tensor.proto) and their TFRecord framing.
// The CRC-32C is Boost.CRC's (polynomial 0x1EDC6F41, reflected, init and final xor ~0).
#include "train/tb_event.h"

#include <boost/crc.hpp>
#include <cstring>
#include <stdexcept>

namespace llmrun::tb {

namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t(field) << 3) | type);
}
void put_bytes(std::string& out, uint32_t field, std::string_view data) {
  put_key(out, field, kBytes);
  put_varint(out, data.size());
  out.append(data);
}
template <class T>
void put_le(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and every target llmrun builds on are little-endian
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}
void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_le(out, v);
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_le(out, v);
}
void put_int(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, uint64_t(v));
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_int(e, 2, step);
  return e;
}

// A cursor over one message's fields.
struct Reader {
  std::string_view buf;
  size_t pos = 0;
  bool done() const { return pos >= buf.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= buf.size()) throw std::runtime_error("truncated varint");
      const uint8_t b = uint8_t(buf[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  std::string_view take(size_t n) {
    if (n > buf.size() - pos) throw std::runtime_error("truncated field");
    const std::string_view s = buf.substr(pos, n);
    pos += n;
    return s;
  }
  // Reads one field: returns its number, sets `type`, and the payload in `bytes` (or `value`).
  uint32_t field(uint32_t& type, std::string_view& bytes, uint64_t& value) {
    const uint64_t key = varint();
    type = uint32_t(key & 7);
    switch (type) {
      case kVarint:
        value = varint();
        break;
      case kFixed64:
        bytes = take(8);
        break;
      case kFixed32:
        bytes = take(4);
        break;
      case kBytes:
        bytes = take(varint());
        break;
      default:
        throw std::runtime_error("unsupported wire type " + std::to_string(type));
    }
    return uint32_t(key >> 3);
  }
};

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
  std::string out;
  put_le(out, uint64_t(data.size()));
  put_le(out, masked_crc32c(out.data(), 8));
  out.append(data);
  put_le(out, masked_crc32c(data.data(), data.size()));
  return out;
}

std::vector<std::string> read_records(std::string_view bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  while (bytes.size() - pos >= 12) {
    uint64_t len;
    std::memcpy(&len, bytes.data() + pos, 8);
    if (u32(pos + 8) != masked_crc32c(bytes.data() + pos, 8)) break;
    if (len > bytes.size() - pos - 16) break;
    const std::string_view data = bytes.substr(pos + 12, len);
    if (u32(pos + 12 + len) != masked_crc32c(data.data(), data.size())) break;
    records.emplace_back(data);
    pos += 16 + len;
  }
  return records;
}

std::string file_version_event(double wall_time) {
  std::string e;
  put_double(e, 1, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;  // Summary.Value: tag = 1, simple_value = 2
    put_bytes(value, 1, tag);
    put_float(value, 2, v);
    put_bytes(summary, 1, value);  // Summary.value = 1 (repeated)
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text) {
  // TensorProto: dtype = 1 (DT_STRING = 7), tensor_shape = 2 (empty: a scalar), string_val = 8.
  std::string tensor;
  put_int(tensor, 1, 7);
  put_bytes(tensor, 2, "");
  put_bytes(tensor, 8, text);
  // SummaryMetadata: plugin_data = 1 {plugin_name = 1}, data_class = 4 (DATA_CLASS_TENSOR = 2).
  std::string plugin;
  put_bytes(plugin, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin);
  put_int(metadata, 4, 2);
  // Summary.Value: tag = 1, tensor = 8, metadata = 9.
  std::string value;
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  std::string summary;
  put_bytes(summary, 1, value);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

EventSummary summarize_event(std::string_view event) {
  EventSummary s;
  Reader ev{event};
  while (!ev.done()) {
    uint32_t type;
    std::string_view bytes;
    uint64_t value = 0;
    const uint32_t f = ev.field(type, bytes, value);
    if (f == 2 && type == kVarint) s.step = int64_t(value);
    if (f == 3 && type == kBytes) s.is_file_version = true;
    if (f != 5 || type != kBytes) continue;
    Reader summary{bytes};
    while (!summary.done()) {
      std::string_view vbytes;
      const uint32_t sf = summary.field(type, vbytes, value);
      if (sf != 1 || type != kBytes) continue;
      Reader v{vbytes};
      while (!v.done()) {
        std::string_view tag;
        if (v.field(type, tag, value) == 1 && type == kBytes) s.tags.emplace_back(tag);
      }
    }
  }
  return s;
}

}  // namespace llmrun::tb
