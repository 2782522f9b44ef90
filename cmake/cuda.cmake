# cuda.cmake: the CUDA backend (src/cuda/*.cu) as the static library
# vllmc_cuda, linked into libvllmc when VLLM_CUDA is ON (the default when nvcc
# is found; -DVLLM_CUDA=OFF disables it). Code is built for Hopper
# (sm_90a machine code) with a compute_80 PTX fallback that the driver
# compiles for other GPUs (-DVLLM_CUDA_PTX=OFF leaves it out). Also labels
# the tests in tests/cuda "gpu".

include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(VLLM_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(VLLM_NVCC)
    set(CMAKE_CUDA_COMPILER ${VLLM_NVCC})
  endif()
endif()
check_language(CUDA)

# Sanitizer and fuzzer builds instrument host code only: CUDA stays off there by default.
set(VLLM_CUDA_DEFAULT OFF)
if(CMAKE_CUDA_COMPILER AND NOT VLLM_SANITIZE AND NOT VLLM_TSAN AND NOT VLLM_FUZZ)
  set(VLLM_CUDA_DEFAULT ON)
endif()
option(VLLM_CUDA "Build the CUDA backend (src/cuda)" ${VLLM_CUDA_DEFAULT})
# OFF: sm_90a machine code only (about half of nvcc's time; binaries built for a Hopper device call)
option(VLLM_CUDA_PTX "Embed the compute_80 PTX fallback for non-Hopper GPUs" ON)

if(VLLM_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "VLLM_CUDA is ON but no CUDA compiler (nvcc) was found; set CUDACXX or -DVLLM_CUDA=OFF")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES OFF)  # the -gencode flags below choose the targets
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "vllm.c: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")

  file(GLOB VLLM_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/cuda/*.cu)
  add_library(vllmc_cuda STATIC ${VLLM_CUDA_SOURCES})
  # the directory's C flags (-Wall ... -march=native) are not nvcc flags
  set_property(TARGET vllmc_cuda PROPERTY COMPILE_OPTIONS "")
  # libvllmc (made before this file) links CUDA code now: no architecture of its own
  set_target_properties(vllmc PROPERTIES CUDA_ARCHITECTURES OFF)
  set_target_properties(vllmc_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(vllmc_cuda PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(vllmc_cuda PRIVATE _GNU_SOURCE)
  target_compile_options(vllmc_cuda PRIVATE
    -std=c++20
    -gencode=arch=compute_90a,code=sm_90a
    --Werror=all-warnings
    -Xcompiler=-Wall,-Wextra,-Werror
    $<$<CONFIG:Release>:-O3>)
  if(VLLM_CUDA_PTX)
    target_compile_options(vllmc_cuda PRIVATE -gencode=arch=compute_80,code=compute_80)
  endif()
  if(TARGET CUDA::cudart_static)
    target_link_libraries(vllmc_cuda PUBLIC CUDA::cudart_static)
  else()
    target_link_libraries(vllmc_cuda PUBLIC CUDA::cudart)
  endif()
  target_link_libraries(vllmc_cuda PUBLIC CUDA::cublasLt CUDA::cublas)
  # vllmc_cuda uses libvllmc's error and log functions and libvllmc's
  # backend registry creates the CUDA backend: a cycle of static libraries,
  # which CMake repeats on the link line.
  target_link_libraries(vllmc_cuda PRIVATE vllmc)
  target_link_libraries(vllmc PUBLIC vllmc_cuda)
  target_compile_definitions(vllmc PRIVATE VLLM_HAVE_CUDA=1)
endif()

# tests/cuda/test_*.c run only on a GPU (they skip with exit code 77 elsewhere):
# label them "gpu" once the test loop below this include has created them.
function(vllm_label_gpu_tests)
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/test_*.c)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    if(TEST cuda_${name})
      set_tests_properties(cuda_${name} PROPERTIES LABELS gpu)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER CALL vllm_label_gpu_tests)
