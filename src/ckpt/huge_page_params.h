#pragma once
// The fp32 parameter store of an inference model kept in transparent huge pages (the weight
// arena, quant/weight_arena.h).
//
// Why: a decode step streams every weight once, one row after another. From 4 KiB pages one
// core reads GPT-2's 500 MB of fp32 rows at ~21 GB/s on the Zen 4 this was measured on, from
// 2 MiB pages at ~28 GB/s (the page walks stop). Only inference loaders use this: training
// buffers keep Backend::allocate.
#include <memory>

#include "model/bucket_store.h"

namespace llmrun {

// Attaches every bucket of `params` (host parameters built with allocate_params = false) to
// zeroed huge-page memory; the result keeps that memory alive and must outlive `params`' use.
std::shared_ptr<void> attach_huge_page_params(BucketStore& params);

}  // namespace llmrun
