# llmrun-cuda-emulator: the llmrun binary with its real CUDA backend (the glue of
# src/backend/cuda/, every kernels/*.cu, cuBLASLt through the same dlopen) running on the CPU:
# the kernels through cuda_emulation.h, the CUDA runtime through emulated_cuda_runtime.cpp,
# cuBLASLt through emulated_cublaslt.cpp, NCCL (when the toolkit has it) through emulated_nccl.cpp,
# its ranks processes sharing /dev/shm. It lets the tests/emulator/ tests check, without a
# GPU, what only a GPU run checked before: the glue's arguments, GEMM layouts and epilogues,
# stream and event ordering, and whole training, generate and serve runs against the CPU
# backend. Included from tests/CMakeLists.txt when the CUDA toolkit (its headers) is found.
set(LLMRUN_EMULATOR_DIR ${CMAKE_BINARY_DIR}/cuda-emulator)
include(${CMAKE_CURRENT_LIST_DIR}/emulated_cublaslt.cmake)

# One host translation unit per kernel family: the prelude, then the .cu.
file(GLOB LLMRUN_EMU_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cu)
set(LLMRUN_EMU_KERNEL_CPP)
foreach(cu ${LLMRUN_EMU_CU})
  get_filename_component(name ${cu} NAME_WE)
  if(name MATCHES "^attention")
    set(shared "LLMRUN_EMULATED_ATTENTION_SMEM")
  else()
    # One block runs at a time: a function-static array is that block's shared memory.
    set(shared "#undef __shared__\n#define __shared__ static")
  endif()
  set(cpp ${LLMRUN_EMULATOR_DIR}/kernels/${name}.cpp)
  file(CONFIGURE OUTPUT ${cpp} CONTENT
    "#include \"tests/device/emulated_kernel_prelude.h\"\n${shared}\n#include \"kernels/${name}.cu\"\n")
  list(APPEND LLMRUN_EMU_KERNEL_CPP ${cpp})
endforeach()
add_library(llmrun_emulated_kernels STATIC ${LLMRUN_EMU_KERNEL_CPP})
target_include_directories(llmrun_emulated_kernels PRIVATE ${CMAKE_SOURCE_DIR}
  ${CMAKE_SOURCE_DIR}/tests/device/emulated_include)
target_compile_options(llmrun_emulated_kernels PRIVATE ${LLMRUN_WARNINGS})

add_library(llmrun_emulated_cudart STATIC ${CMAKE_CURRENT_LIST_DIR}/emulated_cuda_runtime.cpp)
target_include_directories(llmrun_emulated_cudart PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_options(llmrun_emulated_cudart PRIVATE ${LLMRUN_WARNINGS})
if(LLMRUN_HAVE_NCCL)
  include(${CMAKE_CURRENT_LIST_DIR}/emulated_nccl.cmake)
endif()

# llmrun_on_emulated_gpu(TARGET): links TARGET's host code to the emulated kernels and runtime
# instead of the GPU's. ENABLE_EXPORTS: the dlopened cuBLASLt stand-in finds the runtime's
# llmrun_emu_* functions in the binary (and the emulated NCCL its cuda* ones); the build RPATH
# puts cuda-emulator/ (its libcublasLt.so.N and libnccl.so.2) ahead of the toolkit's.
function(llmrun_on_emulated_gpu target)
  target_link_libraries(${target} PRIVATE llmrun_host llmrun_emulated_kernels llmrun_emulated_cudart)
  set_target_properties(${target} PROPERTIES ENABLE_EXPORTS ON BUILD_RPATH ${LLMRUN_EMULATOR_DIR})
  add_dependencies(${target} llmrun_emulated_cublaslt)
  if(LLMRUN_HAVE_NCCL)
    add_dependencies(${target} llmrun_emulated_nccl)
  endif()
endfunction()

add_executable(llmrun-cuda-emulator $<TARGET_OBJECTS:llmrun_cli>)
llmrun_on_emulated_gpu(llmrun-cuda-emulator)
target_link_libraries(llmrun-cuda-emulator PRIVATE CLI11::CLI11)
set_target_properties(llmrun-cuda-emulator PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${LLMRUN_EMULATOR_DIR})

# tests/emulator/NAME.sh EMULATOR LLMRUN SOURCE_DIR: the emulated GPU against the CPU backend.
file(GLOB LLMRUN_EMU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/emulator/*.sh)
foreach(t ${LLMRUN_EMU_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME emulator.${name} COMMAND bash ${t} $<TARGET_FILE:llmrun-cuda-emulator>
    $<TARGET_FILE:llmrun> ${CMAKE_SOURCE_DIR})
endforeach()

# The emulated runtime's own rules (deferral, waits, refusals).
add_executable(llmrun_emulated_runtime_tests ${CMAKE_CURRENT_LIST_DIR}/test_emulated_cuda_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emulated_runtime_test_kernels.cpp)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/test_emulated_cuda_runtime.cpp PROPERTIES
  INCLUDE_DIRECTORIES "${CUDAToolkit_INCLUDE_DIRS}")
target_compile_options(llmrun_emulated_runtime_tests PRIVATE ${LLMRUN_WARNINGS})
target_link_libraries(llmrun_emulated_runtime_tests PRIVATE llmrun_emulated_cudart GTest::gtest_main)
gtest_discover_tests(llmrun_emulated_runtime_tests DISCOVERY_TIMEOUT 60)

# The unit tests that need a GPU (elsewhere they print SKIPPED: no CUDA device), on the
# emulated one: the conformance suite's CUDA instance, FP8 casts and GEMMs against the CPU
# emulation, both device samplers against the host's, and a one-rank NCCL communicator (on the
# emulated NCCL). The same tests run-checks.sh runs on a real GPU; their CTest names start with
# "emulated_gpu.".
add_executable(llmrun_emulated_gpu_tests ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_backend_conformance.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cuda_fp8.cpp ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cuda_uploads.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sampling_math.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sampling_rows_math.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_nccl_one_rank.cpp)
target_compile_options(llmrun_emulated_gpu_tests PRIVATE ${LLMRUN_WARNINGS})
llmrun_on_emulated_gpu(llmrun_emulated_gpu_tests)
target_link_libraries(llmrun_emulated_gpu_tests PRIVATE GTest::gtest_main)
gtest_discover_tests(llmrun_emulated_gpu_tests TEST_PREFIX "emulated_gpu."
  PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" DISCOVERY_TIMEOUT 60)
