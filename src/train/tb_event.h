#pragma once
// TensorBoard's on-disk format, written and read by hand: TFRecord framing (uint64 length,
// masked CRC32C of the length, data, masked CRC32C of the data; all little-endian) around
// Event protobufs with TensorFlow's field numbers (tensorflow/core/util/event.proto,
// core/framework/summary.proto, tensor.proto). Only what llmrun writes is encoded: the
// file_version event, scalar summaries (simple_value) and text summaries (a DT_STRING scalar
// tensor under the "text" plugin).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmrun::tb {

// CRC-32C (Castagnoli), and TFRecord's "masked" form of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord: the framing around `data`.
std::string frame_record(std::string_view data);
// The records of a TFRecord file's bytes, in order, up to the first one that is torn or
// fails a CRC (a writer that died mid-record leaves such a tail).
std::vector<std::string> read_records(std::string_view bytes);

std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values);
std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text);

// What the writer needs back from its own events when it resumes.
struct EventSummary {
  int64_t step = 0;
  bool is_file_version = false;
  std::vector<std::string> tags;  // the summary values' tags
};
// Throws std::runtime_error for bytes that are not a well-formed Event.
EventSummary summarize_event(std::string_view event);

}  // namespace llmrun::tb
