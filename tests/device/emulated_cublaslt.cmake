# The emulated cuBLASLt (emulated_cublaslt.cpp) and its tests. Included from emulated_cuda.cmake
# inside if(LLMRUN_HAVE_CUDA): it needs cublasLt.h from CUDAToolkit_INCLUDE_DIRS, and nothing
# else from CUDA. The library lands as ${CMAKE_BINARY_DIR}/cuda-emulator/libcublasLt.so.<major>,
# the name llmrun dlopens (cuda_cublaslt_loader.cpp; cuBLAS's major version is the toolkit's).
# LLMRUN_EMULATOR_DIR (build/cuda-emulator/) comes from emulated_cuda.cmake, which includes this.

add_library(llmrun_emulated_cublaslt SHARED ${CMAKE_CURRENT_LIST_DIR}/emulated_cublaslt.cpp)
target_include_directories(llmrun_emulated_cublaslt PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_features(llmrun_emulated_cublaslt PRIVATE cxx_std_20)
target_compile_options(llmrun_emulated_cublaslt PRIVATE -Wall -Wextra -Werror)
target_link_libraries(llmrun_emulated_cublaslt PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(llmrun_emulated_cublaslt PROPERTIES
  OUTPUT_NAME cublasLt
  VERSION ${CUDAToolkit_VERSION_MAJOR}
  SOVERSION ${CUDAToolkit_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${LLMRUN_EMULATOR_DIR})

# The tests reach the library only through dlopen/dlsym, as llmrun does: linking it would bind
# the symbols at link time and hide a missing export. The executable exports its own
# llmrun_emu_memory_kind, so the library's device-memory check is live in the tests.
add_executable(llmrun_emulated_cublaslt_tests ${CMAKE_CURRENT_LIST_DIR}/test_emulated_cublaslt.cpp)
target_include_directories(llmrun_emulated_cublaslt_tests PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_features(llmrun_emulated_cublaslt_tests PRIVATE cxx_std_20)
target_compile_options(llmrun_emulated_cublaslt_tests PRIVATE -Wall -Wextra -Werror)
target_compile_definitions(llmrun_emulated_cublaslt_tests PRIVATE
  LLMRUN_EMULATED_CUBLASLT="${LLMRUN_EMULATOR_DIR}/libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}")
target_link_libraries(llmrun_emulated_cublaslt_tests PRIVATE GTest::gtest_main ${CMAKE_DL_LIBS})
set_target_properties(llmrun_emulated_cublaslt_tests PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(llmrun_emulated_cublaslt_tests llmrun_emulated_cublaslt)
include(GoogleTest)
gtest_discover_tests(llmrun_emulated_cublaslt_tests DISCOVERY_TIMEOUT 60)
