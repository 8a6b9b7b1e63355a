#pragma once
// Hands the heap's free pages back to the kernel. Loading a model parses large metadata
// (a 50k-token vocabulary as JSON: ~30 MiB at its peak) and frees it again, but the allocator
// keeps the freed pages resident for reuse; a server that never needs that much heap again
// would carry them for its whole life (12 MiB for a GPT-2 GGUF file). Call after such a phase.
namespace llmrun {

void release_free_heap();

}  // namespace llmrun
