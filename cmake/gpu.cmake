# SPDX-License-Identifier: Apache-2.0
# gpu.cmake - the CUDA pieces of tpx, all optional at build time.
#
# Defines the object library `tpx_gpu`: the run-time CUDA driver loader
# (src/gpu/cuda.c: dlopen("libcuda.so.1"), never linked) and the unpack
# launcher (src/unpack/unpack_gpu.c). When nvcc is found, the unpack kernel
# is compiled to a fatbin (sm_80, sm_90 and compute_90 PTX) and embedded in
# the library as a byte array. Without nvcc the copy of that fatbin kept in
# the tree (src/unpack/unpack_kernel.fatbin, see fatbin_stamp.cmake) is
# embedded instead, if it was built from the current sources and options;
# otherwise the library builds all the same and tpx__unpack_gpu_init()
# returns TPX_ERR_UNSUPPORTED (TPX_UNPACK=d2d works).
#
# Include it from the top-level CMakeLists.txt (include(cmake/gpu.cmake))
# and add $<TARGET_OBJECTS:tpx_gpu> to the libraries.

option(TPX_WITH_NVCC "Compile and embed the CUDA unpack kernel when nvcc is found" ON)
set(TPX_CUDA_GENCODE
    -gencode arch=compute_80,code=sm_80
    -gencode arch=compute_90,code=sm_90
    -gencode arch=compute_90,code=compute_90
    CACHE STRING "nvcc -gencode options for the unpack kernel")

if(TPX_WITH_NVCC)
  find_program(TPX_NVCC nvcc
               HINTS ENV CUDA_HOME ENV CUDA_PATH
               PATH_SUFFIXES bin
               PATHS /usr/local/cuda/bin /usr/local/cuda)
endif()

set(TPX_GPU_SOURCES src/gpu/gpu_api.c src/unpack/unpack_gpu.c)
set(TPX_UNPACK_THREADS 256 CACHE STRING "threads per block of the unpack kernel")
set(TPX_UNPACK_FRAGS_PER_WARP 2 CACHE STRING "fragments a warp copies per step")
set(_tpx_unpack_defs -DTPX__UNPACK_GPU_THREADS=${TPX_UNPACK_THREADS}
                     -DTPX__UNPACK_GPU_FRAGS_PER_WARP=${TPX_UNPACK_FRAGS_PER_WARP})
add_compile_definitions(TPX__UNPACK_GPU_THREADS=${TPX_UNPACK_THREADS}
                        TPX__UNPACK_GPU_FRAGS_PER_WARP=${TPX_UNPACK_FRAGS_PER_WARP})
include(${PROJECT_SOURCE_DIR}/cmake/fatbin_stamp.cmake)
string(JOIN " " TPX_FATBIN_FLAGS ${TPX_CUDA_GENCODE} ${_tpx_unpack_defs})
set(_tpx_gen ${PROJECT_BINARY_DIR}/gen)
set(_tpx_fatbin_c ${_tpx_gen}/unpack_kernel_fatbin.c)
set(TPX_HAVE_UNPACK_KERNEL OFF)

if(TPX_WITH_NVCC AND TPX_NVCC)
  set(_tpx_fatbin ${_tpx_gen}/unpack_kernel.fatbin)
  add_custom_command(
    OUTPUT ${_tpx_fatbin}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${_tpx_gen}
    COMMAND ${TPX_NVCC} -fatbin -std=c++17 -O3 -Werror all-warnings ${_tpx_unpack_defs}
            -Xcompiler=-Wall,-Wextra ${TPX_CUDA_GENCODE}
            -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/src
            -o ${_tpx_fatbin} ${PROJECT_SOURCE_DIR}/src/unpack/unpack_kernel.cu
    DEPENDS ${PROJECT_SOURCE_DIR}/src/unpack/unpack_kernel.cu
            ${PROJECT_SOURCE_DIR}/src/unpack/unpack_gpu.h
            ${PROJECT_SOURCE_DIR}/include/tpx/ncclnet.h
            ${PROJECT_SOURCE_DIR}/include/tpx/status.h
    COMMENT "nvcc: unpack kernel -> fatbin (sm_80, sm_90, compute_90 PTX)"
    VERBATIM)
  # Refresh the copy kept in the tree (for builds without nvcc).
  add_custom_target(unpack_fatbin_copy
    COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DFLAGS=${TPX_FATBIN_FLAGS}
            -DMODE=write -DFATBIN=${_tpx_fatbin} -P ${PROJECT_SOURCE_DIR}/cmake/fatbin_stamp.cmake
    DEPENDS ${_tpx_fatbin}
    VERBATIM)
  set(TPX_HAVE_UNPACK_KERNEL ON)
  message(STATUS "tpx: CUDA unpack kernel enabled (${TPX_NVCC})")
else()
  set(_tpx_fatbin ${PROJECT_SOURCE_DIR}/${TPX_FATBIN_COPY})
  set(_tpx_have_stamp "")
  if(EXISTS ${PROJECT_SOURCE_DIR}/${TPX_FATBIN_STAMP})
    file(READ ${PROJECT_SOURCE_DIR}/${TPX_FATBIN_STAMP} _tpx_have_stamp)
    string(STRIP "${_tpx_have_stamp}" _tpx_have_stamp)
  endif()
  tpx_fatbin_stamp(_tpx_want_stamp ${PROJECT_SOURCE_DIR} "${TPX_FATBIN_FLAGS}")
  if(EXISTS ${_tpx_fatbin} AND _tpx_have_stamp STREQUAL _tpx_want_stamp)
    set(TPX_HAVE_UNPACK_KERNEL ON)
    message(STATUS "tpx: nvcc not found or TPX_WITH_NVCC=OFF: embedding the prebuilt unpack "
                   "kernel ${TPX_FATBIN_COPY} (sm_80, sm_90, compute_90 PTX)")
  else()
    message(WARNING "tpx: nvcc not found or TPX_WITH_NVCC=OFF, and ${TPX_FATBIN_COPY} was "
                    "not built from these sources and options: building without the CUDA "
                    "unpack kernel (GPU receives need TPX_UNPACK=d2d)")
  endif()
endif()
if(TPX_HAVE_UNPACK_KERNEL)
  add_custom_command(
    OUTPUT ${_tpx_fatbin_c}
    COMMAND ${CMAKE_COMMAND} -DIN=${_tpx_fatbin} -DOUT=${_tpx_fatbin_c}
            -DSYMBOL=tpx__unpack_fatbin -P ${PROJECT_SOURCE_DIR}/cmake/bin2c.cmake
    DEPENDS ${_tpx_fatbin} ${PROJECT_SOURCE_DIR}/cmake/bin2c.cmake
    COMMENT "embedding the unpack kernel fatbin"
    VERBATIM)
  list(APPEND TPX_GPU_SOURCES ${_tpx_fatbin_c})
endif()

# The driver loader alone: also linked into the plugin (CUDA staging).
add_library(tpx_cuda OBJECT src/gpu/cuda.c src/gpu/devmem.c)
target_include_directories(tpx_cuda PUBLIC include src)
add_library(tpx_gpu OBJECT ${TPX_GPU_SOURCES})
target_include_directories(tpx_gpu PUBLIC include src)
if(TPX_HAVE_UNPACK_KERNEL)
  target_compile_definitions(tpx_gpu PRIVATE TPX_HAVE_UNPACK_FATBIN=1)
endif()
