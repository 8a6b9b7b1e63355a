#pragma once
// Memory for the weights inference streams (the copies a plan keeps in the x16 layout, the rows
// a GGUF loader copies, an inference model's fp32 buckets), backed by transparent huge pages.
//
// Why: a decode step streams every weight once. From 4 KiB pages (a file mapping, or a heap
// copy) one core reads 250 MB of GPT-2 F16 rows at about 23 GB/s on the Zen 4 this was tuned
// on; from 2 MiB pages at about 30 GB/s, since the page walks stop (one TLB entry per 2 MiB
// instead of per 4 KiB). Copies are therefore carved, one after another, from 2 MiB-aligned
// mappings of kChunkBytes marked MADV_HUGEPAGE (the kernel's default THP mode, "madvise",
// grants huge pages only to such regions). Small copies share a chunk, so a model of many small
// matrices still gets whole huge pages; a chunk's untouched tail costs no memory, and the chunk
// is unmapped when the last copy carved from it is freed.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace llmrun::quant {

// `bytes` zeroed bytes, 64-byte aligned; freed when the last shared_ptr to them goes.
std::shared_ptr<uint8_t> weight_copy_bytes(size_t bytes);

// Gives back the memory the current chunk has committed past its last copy (up to 2 MiB: the
// rest of the huge page it ended in); a loader calls it once it has made its copies. Copies
// carved from there later get fresh zero pages.
void trim_weight_arena();

// Copies rows [0, rows) of `stride` bytes from `src` into weight_copy_bytes, calling
// progress(src, bytes copied so far) after each ~1 MiB and at the end (so a loader can drop
// the source's file pages as it goes).
std::shared_ptr<uint8_t> copy_weight_rows(
    const uint8_t* src, size_t stride, int64_t rows,
    const std::function<void(const uint8_t* source, size_t bytes)>& progress);

}  // namespace llmrun::quant
