// Llama 3.1 RoPE scaling in GGUF files. llama.cpp keeps it as a tensor, rope_freqs.weight
// (F32, head_dim / 2 values): frequency i turns at theta^(-2i/d) / rope_freqs[i], the
// factors its converter computes from config.json's llama3 rope_scaling. llmrun writes that
// tensor plus the four llama3 parameters under llmrun.rope.llama3.* (keys llama.cpp ignores),
// and reads either back: with the keys, the parameters (checked against the tensor); without
// them (a file llama.cpp's converter wrote), the parameters recovered from the factors, given
// the original context (rope.scaling.original_context_length, else Llama 3.1's 8192), which
// needs two frequencies in the blended band.
#pragma once
#include <string>
#include <vector>

#include "backend/rope_frequencies.h"
#include "ckpt/gguf_file.h"

namespace llmrun {

// rope_freqs[i] for a llama3 scaling, as llama.cpp's convert_hf_to_gguf.py computes them.
std::vector<float> llama3_rope_factors(float theta, int head_dim, const RopeScaling& s);

// Adds rope_freqs.weight and the llmrun.rope.llama3.* keys for a llama3 scaling.
void write_gguf_rope_freqs(GgufWriter& w, const std::string& arch_prefix, float theta, int head_dim,
                           const RopeScaling& s);

// The llama3 scaling that rope_freqs.weight (which the file must hold) encodes; UserError
// naming the tensor when its shape or type is wrong or no llama3 scaling gives its factors.
RopeScaling read_gguf_rope_freqs(const GgufReader& r, const std::string& arch_prefix, float theta,
                                 int head_dim);

}  // namespace llmrun
