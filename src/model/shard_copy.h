#pragma once
// Moving a tensor-parallel rank's part of a tensor in and out of the full tensor
// (TensorShard: ranges along one axis), for initialisation and Hugging Face files, which hold
// full tensors (training checkpoints place pieces with ckpt/checkpoint_pieces instead).
#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "model/param_layout.h"

namespace llmrun {

// Calls run(full_offset, local_offset, count) for each contiguous run of elements that
// spec's local tensor shares with the full one, in local order.
void for_each_shard_run(const ParamSpec& spec,
                        const std::function<void(int64_t, int64_t, int64_t)>& run);

// local (spec.numel() elements) = this rank's part of full (spec.full_numel() elements).
void extract_shard(Backend& be, const ParamSpec& spec, const Tensor& full, Tensor local);
// The inverse: writes local into its place in full (other elements untouched).
void insert_shard(Backend& be, const ParamSpec& spec, const Tensor& local, Tensor full);

}  // namespace llmrun
