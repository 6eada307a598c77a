# Optional oneDNN sgemm, the opt-in engine of the CPU's float GEMMs (CT_CPU_GEMM=onednn at run time;
# backends/cpu/gemm_engine.c says why OpenBLAS stays the default): CTRAINER_ONEDNN=AUTO builds it in
# where oneDNN's headers and library are found and it runs on OpenMP (Debian's libdnnl-dev), ON
# requires it, OFF leaves it out. Its JIT sgemm is 10-15% faster than OpenBLAS's at the example
# models' shapes on AVX-512 and SSE4.2 CPUs (bench/README.md).
#
# The library is not linked: gemm_engine.c opens it (its soname, libdnnl.so.<major>) when
# CT_CPU_GEMM=onednn asks for it, so a program that does not ask neither loads it (4 MiB of
# resident memory, and OpenCL's loader, which Debian's build links) nor needs it installed. Only
# its C headers are used here: Debian's CMake package for it asks for OpenCL too. A oneDNN built on
# TBB or its sequential runtime would run beside our OpenMP team or single-threaded, so only an
# OpenMP build is taken. Defines CTRAINER_ONEDNN_ENABLED and, when ON, CT_HAVE_ONEDNN=1 for
# ctrainer_objects. Included by the top-level CMakeLists.txt after ctrainer_objects is defined.

set(CTRAINER_ONEDNN_ENABLED OFF)
if(CTRAINER_ONEDNN STREQUAL "OFF")
  message(STATUS "ctrainer: float GEMMs with OpenBLAS only (CTRAINER_ONEDNN=OFF)")
  return()
endif()

find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
find_library(DNNL_LIBRARY NAMES dnnl)
set(_ct_dnnl_problem "")
if(NOT DNNL_INCLUDE_DIR OR NOT DNNL_LIBRARY)
  set(_ct_dnnl_problem "oneDNN was not found (oneapi/dnnl/dnnl.h and libdnnl)")
else()
  file(STRINGS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_config.h _ct_dnnl_runtime
       REGEX "^#define DNNL_CPU_THREADING_RUNTIME ")
  file(STRINGS ${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h _ct_dnnl_major REGEX "^#define DNNL_VERSION_MAJOR ")
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _ct_dnnl_major "${_ct_dnnl_major}")
  get_filename_component(_ct_dnnl_dir "${DNNL_LIBRARY}" DIRECTORY)
  # the name gemm_engine.c opens: the library's soname, libdnnl.so.<major>
  set(_ct_dnnl_soname "${CMAKE_SHARED_LIBRARY_PREFIX}dnnl${CMAKE_SHARED_LIBRARY_SUFFIX}.${_ct_dnnl_major}")
  if(NOT _ct_dnnl_major MATCHES "^[0-9]+$")
    set(_ct_dnnl_problem "${DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h names no DNNL_VERSION_MAJOR")
  elseif(NOT EXISTS "${_ct_dnnl_dir}/${_ct_dnnl_soname}")
    set(_ct_dnnl_problem "no ${_ct_dnnl_soname} beside ${DNNL_LIBRARY} (the headers are of version ${_ct_dnnl_major})")
  elseif(NOT _ct_dnnl_runtime MATCHES "DNNL_RUNTIME_OMP")
    set(_ct_dnnl_problem "the oneDNN at ${DNNL_LIBRARY} does not thread with OpenMP (${_ct_dnnl_runtime})")
  endif()
endif()
if(_ct_dnnl_problem)
  if(CTRAINER_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "CTRAINER_ONEDNN=ON, but ${_ct_dnnl_problem}. Install it with: apt-get install libdnnl-dev "
                        "(scripts/setup.sh does), or build with OpenBLAS only: -DCTRAINER_ONEDNN=OFF.")
  endif()
  message(STATUS "ctrainer: ${_ct_dnnl_problem}; float GEMMs with OpenBLAS only (-DCTRAINER_ONEDNN=ON requires oneDNN)")
  return()
endif()
set(CTRAINER_ONEDNN_ENABLED ON)
target_compile_definitions(ctrainer_objects PUBLIC CT_HAVE_ONEDNN=1)
target_include_directories(ctrainer_objects PRIVATE ${DNNL_INCLUDE_DIR}) # only gemm_engine.c includes it
message(STATUS "ctrainer: oneDNN's sgemm for float GEMMs under CT_CPU_GEMM=onednn (${DNNL_LIBRARY}, "
               "opened as ${_ct_dnnl_soname})")
set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/backends/cpu/gemm_engine.c APPEND PROPERTY
             COMPILE_DEFINITIONS CT_ONEDNN_SONAME="${_ct_dnnl_soname}")
