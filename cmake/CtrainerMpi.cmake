# Optional MPI: CTRAINER_MPI=AUTO enables it where an MPI is found, ON requires one, OFF skips it.
# Without MPI the library is single-process: CMakeLists.txt compiles dist/mpi/comm_mpi_off.c instead
# of dist/mpi/comm_mpi.c, the CUDA module is built without the NCCL communicator (NCCL is bootstrapped
# through MPI) and dist/nccl/nccl_entry.c says so; both answer with CT_ERR_UNSUPPORTED, and the MPI
# tests and benchmark are not built.
# Machines without an MPI (the GPU machines, which have no apt) can then still build and test.
set(CTRAINER_MPI_ENABLED OFF)
if(CTRAINER_MPI STREQUAL "OFF")
  message(STATUS "ctrainer: MPI disabled (CTRAINER_MPI=OFF): single-process builds only")
  return()
endif()
if(CTRAINER_MPI STREQUAL "ON")
  find_package(MPI REQUIRED COMPONENTS C)
else()
  find_package(MPI COMPONENTS C)
endif()
if(NOT MPI_C_FOUND)
  message(STATUS "ctrainer: MPI not found, building without it (single process only; -DCTRAINER_MPI=ON requires it)")
  return()
endif()
set(CTRAINER_MPI_ENABLED ON)
message(STATUS "ctrainer: MPI enabled (${MPI_C_LIBRARIES})")
