#pragma once
// What the program is allocating right now ("the optimizer state", "the training data"), so
// that an allocation failure (std::bad_alloc) can be reported as "out of memory while
// allocating X" instead of as an internal failure. Set it before each large allocation; it
// is process-wide (the big allocations happen on the main thread) and the last one set
// stands until the next.
#include <string>

namespace llmrun {

void set_allocation_phase(std::string what);
std::string allocation_phase();  // "" when none was set

// The one-line message for a std::bad_alloc that ended a command.
std::string out_of_memory_message();

}  // namespace llmrun
