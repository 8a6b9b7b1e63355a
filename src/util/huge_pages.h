#pragma once
// Transparent huge pages for memory that is streamed whole (weights, parameter buckets).
//
// A decode step reads every weight once; from 4 KiB pages one core spends a large share of
// that time on page walks (GPT-2 fp32 decode: 1.4x faster with the parameters in 2 MiB pages
// on the Zen 4 this was measured on). The kernel's default THP mode, "madvise", grants huge
// pages only to regions advised so; buffers touched only in part (a KV pool sized for the
// worst case) are left alone, since a 2 MiB page commits all of its memory at the first touch.
#include <cstddef>

namespace llmrun {

// Advises the whole 4 KiB pages inside [p, p + bytes) for huge pages, when bytes is at least
// one huge page (advice only: where THP is off they stay small).
void advise_huge_pages(void* p, size_t bytes);

}  // namespace llmrun
