# SPDX-License-Identifier: Apache-2.0
# fatbin_stamp.cmake - what the unpack kernel's fatbin was built from.
#
# src/unpack/unpack_kernel.fatbin is a copy of the nvcc output kept in the
# tree, so that a build without nvcc (an sdist built with a C compiler alone)
# still embeds the kernel. Its stamp, unpack_kernel.fatbin.sha256, is the
# SHA-256 of the kernel's sources and the nvcc options; a copy whose stamp
# does not match the sources is never embedded (the build says so and the
# library falls back to TPX_UNPACK=d2d), and the test unit.unpack_fatbin_copy
# fails until the copy is regenerated (`cmake --build <dir> --target
# unpack_fatbin_copy`, with nvcc).
#
#   include(cmake/fatbin_stamp.cmake): tpx_fatbin_stamp(<out-var> <src-dir> <flags>)
#   cmake -DSRC=<dir> -DFLAGS=<flags> -DMODE=check|write [-DFATBIN=<file>] -P fatbin_stamp.cmake
#     check: fail unless the stamp matches; write: copy FATBIN in and stamp it.

set(TPX_FATBIN_INPUTS src/unpack/unpack_kernel.cu src/unpack/unpack_gpu.h
                      include/tpx/ncclnet.h include/tpx/status.h)
set(TPX_FATBIN_COPY src/unpack/unpack_kernel.fatbin)
set(TPX_FATBIN_STAMP src/unpack/unpack_kernel.fatbin.sha256)

function(tpx_fatbin_stamp out src flags)
  set(all "${flags}\n")
  foreach(f IN LISTS TPX_FATBIN_INPUTS)
    file(SHA256 ${src}/${f} h)
    string(APPEND all "${h}  ${f}\n")
  endforeach()
  string(SHA256 h "${all}")
  set(${out} ${h} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  tpx_fatbin_stamp(want "${SRC}" "${FLAGS}")
  if(MODE STREQUAL "write")
    file(COPY_FILE ${FATBIN} ${SRC}/${TPX_FATBIN_COPY})
    file(WRITE ${SRC}/${TPX_FATBIN_STAMP} "${want}\n")
    message(STATUS "wrote ${TPX_FATBIN_COPY} and its stamp")
  else()
    file(READ ${SRC}/${TPX_FATBIN_STAMP} have)
    string(STRIP "${have}" have)
    if(NOT have STREQUAL want)
      message(FATAL_ERROR "${TPX_FATBIN_COPY} is older than the kernel's sources or nvcc "
              "options: regenerate it with `cmake --build <build dir> --target "
              "unpack_fatbin_copy` (needs nvcc) and commit both files")
    endif()
    message(STATUS "${TPX_FATBIN_COPY} matches its sources")
  endif()
endif()
