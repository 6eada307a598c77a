# Finds OpenBLAS as the target OpenBLAS::OpenBLAS, preferring its OpenMP build (Debian's
# libopenblas-openmp-dev): BLAS calls then share the OpenMP thread team of our own loops instead of
# a second pthread pool spinning against it. Falls back to any libopenblas.
set(_ct_blas_dirs /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_library(OpenBLAS_LIBRARY NAMES openblas HINTS ${_ct_blas_dirs} NO_DEFAULT_PATH)
if(OpenBLAS_LIBRARY)
  find_path(OpenBLAS_INCLUDE_DIR cblas.h HINTS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
  set(OpenBLAS_OPENMP TRUE)
else()
  find_library(OpenBLAS_LIBRARY NAMES openblas)
  find_path(OpenBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread)
  set(OpenBLAS_OPENMP FALSE)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES IMPORTED_LOCATION "${OpenBLAS_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
endif()
