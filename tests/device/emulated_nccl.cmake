# The emulated NCCL (emulated_nccl.cpp) and its tests. Included from emulated_cuda.cmake inside
# if(LLMRUN_HAVE_CUDA) when LLMRUN_HAVE_NCCL: it compiles against the toolkit's nccl.h (so the
# signatures are the real ones) and needs nothing else from CUDA or NCCL. The library lands as
# ${LLMRUN_EMULATOR_DIR}/libnccl.so.2, the name llmrun dlopens (comm/nccl_communicator.cpp);
# the emulated CUDA runtime it calls (stream flushes, the current device, device-memory
# queries) is found in the executable that loads it.

add_library(llmrun_emulated_nccl SHARED ${CMAKE_CURRENT_LIST_DIR}/emulated_nccl.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emulated_nccl_shm.cpp ${CMAKE_CURRENT_LIST_DIR}/emulated_nccl_reduce.cpp)
target_include_directories(llmrun_emulated_nccl PRIVATE ${LLMRUN_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
target_compile_features(llmrun_emulated_nccl PRIVATE cxx_std_20)
target_compile_options(llmrun_emulated_nccl PRIVATE -Wall -Wextra -Werror)
target_link_libraries(llmrun_emulated_nccl PRIVATE ${CMAKE_DL_LIBS} rt)
set_target_properties(llmrun_emulated_nccl PROPERTIES
  OUTPUT_NAME nccl
  VERSION 2
  SOVERSION 2
  LIBRARY_OUTPUT_DIRECTORY ${LLMRUN_EMULATOR_DIR})

# The library's own rules, its ranks forked processes on the emulated runtime (linked in and
# exported, as llmrun-cuda-emulator does); the library is dlopened by path, as llmrun does.
add_executable(llmrun_emulated_nccl_tests ${CMAKE_CURRENT_LIST_DIR}/test_emulated_nccl.cpp)
target_include_directories(llmrun_emulated_nccl_tests PRIVATE ${LLMRUN_NCCL_INCLUDE}
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_features(llmrun_emulated_nccl_tests PRIVATE cxx_std_20)
target_compile_options(llmrun_emulated_nccl_tests PRIVATE -Wall -Wextra -Werror)
target_compile_definitions(llmrun_emulated_nccl_tests PRIVATE
  LLMRUN_EMULATED_NCCL="${LLMRUN_EMULATOR_DIR}/libnccl.so.2")
target_link_libraries(llmrun_emulated_nccl_tests PRIVATE llmrun_emulated_cudart GTest::gtest_main
  ${CMAKE_DL_LIBS})
set_target_properties(llmrun_emulated_nccl_tests PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(llmrun_emulated_nccl_tests llmrun_emulated_nccl)
gtest_discover_tests(llmrun_emulated_nccl_tests DISCOVERY_TIMEOUT 60)
