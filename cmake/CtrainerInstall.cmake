# cmake --install: library, headers, CLI, pkg-config and CMake package files.
#
#   <prefix>/lib/libctrainer.a, libctrainer.so -> .so.0 (SONAME) -> .so.<version>
#   <prefix>/include/ctrainer/           public headers with the source tree's layout (core/tensor.h,
#                                        trainer/trainer.h, ...), ctrainer.h (everything) and ctrainer_version.h
#   <prefix>/bin/ctrainer                the CLI (linked statically against the library)
#   <prefix>/lib/pkgconfig/ctrainer.pc   pkg-config, relocatable (paths relative to the .pc file)
#   <prefix>/lib/cmake/ctrainer/         find_package(ctrainer): ctrainerConfig.cmake, its version file,
#                                        the exported targets ctrainer::ctrainer (shared) and
#                                        ctrainer::ctrainer_static, and the find modules they need
#   <prefix>/share/man/man1/ctrainer.1   the man page, from the CLI's --help texts
#
# Public headers are every header of the library's areas except the private ones: *_impl.h and
# *_tmpl.h (an area's internals), backends/ (kernels), and the internal helpers listed
# in CT_PRIVATE_HEADERS. The headers include each other as "core/tensor.h", so programs compile with
# -I<prefix>/include/ctrainer (and -I<prefix>/include for <ctrainer/ctrainer.h>); both come with the
# targets and the .pc file. tests/install/test_install.sh compiles every installed header alone.
#
# Dependencies. The exported targets cannot name the object library the objects come from, so they get
# its dependencies themselves, read from ctrainer_objects here at the end of the configuration — also
# what cmake/CtrainerTensorboard.cmake, cmake/CtrainerPlot.cmake (or anything else) link to it, so a
# build without TensorBoard or curves neither requires nor names protobuf-c or cairo. Their headers
# (callbacks/tensorboard.h, report/plot.h) are installed either way: they include neither library,
# and without it their functions answer CT_ERR_UNSUPPORTED. The
# ones whose headers the public headers include (CT_INTERFACE_DEPS) are PUBLIC, every other one is
# needed only to link the static library. For each, ctrainerConfig.cmake finds the package again
# (find_dependency by the target's namespace, our own ct::* imported targets re-created from their
# paths) and ctrainer.pc names the pkg-config module that links the same library, or the library
# itself where no module does (Debian's openblas.pc, for one, names the pthread build, not the
# OpenMP one we link).

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CTRAINER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ctrainer CACHE STRING
    "Where cmake --install puts ctrainerConfig.cmake (relative to the prefix)")
set(CTRAINER_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig CACHE STRING
    "Where cmake --install puts ctrainer.pc (relative to the prefix)")
set(CT_INTERFACE_DEPS jansson::jansson HDF5::HDF5) # json_t and hid_t appear in public headers
set(CT_PRIVATE_HEADERS callbacks/pyrepr.h data/hdf5_util.h core/format/h5_image.h)

# --- the version header (ctrainer.h includes it) -------------------------------------------------------
configure_file(${PROJECT_SOURCE_DIR}/cmake/ctrainer_version.h.in
               ${PROJECT_BINARY_DIR}/include/ctrainer/ctrainer_version.h @ONLY)

# --- the exported targets' dependencies ------------------------------------------------------------------
get_target_property(_ct_deps ctrainer_objects LINK_LIBRARIES)
if(NOT _ct_deps)
  set(_ct_deps)
endif()
# Objects of another language need its compiler's runtime, which a C program's link does not bring
# (nvcc's host code is C++: libstdc++), so the static library lists it itself.
get_property(_ct_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
foreach(_lang IN LISTS _ct_languages)
  if(NOT _lang MATCHES "^(C|NONE)$")
    foreach(_lib IN LISTS CMAKE_${_lang}_IMPLICIT_LINK_LIBRARIES)
      if(NOT _lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES AND NOT _lib IN_LIST _ct_deps)
        list(APPEND _ct_deps ${_lib})
      endif()
    endforeach()
  endif()
endforeach()
set(_ct_public_deps)
set(_ct_private_deps)
foreach(_dep IN LISTS _ct_deps)
  if(_dep IN_LIST CT_INTERFACE_DEPS)
    list(APPEND _ct_public_deps "${_dep}")
  else()
    list(APPEND _ct_private_deps "${_dep}")
  endif()
endforeach()
target_link_libraries(ctrainer_shared PUBLIC ${_ct_public_deps})
foreach(_t ctrainer_shared ctrainer_static)
  # <ctrainer/ctrainer.h>, and the headers it includes as "core/tensor.h"
  target_include_directories(${_t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ctrainer>)
endforeach()
target_link_libraries(ctrainer_static PUBLIC ${_ct_public_deps} PRIVATE ${_ct_private_deps})
foreach(_t ctrainer_shared ctrainer)
  # Libraries outside the system directories (CUDA, cuDNN, NCCL, MPI) stay findable once installed.
  set_target_properties(${_t} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endforeach()

# The text that makes the dependency `item` (an entry of a link list) exist in a consumer's project, or ""
# where nothing needs finding (a path, a plain library name, a flag).
function(_ct_find_dependency_text item out)
  set(text "")
  if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(item "${CMAKE_MATCH_1}")
  endif()
  if(NOT TARGET "${item}")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  if(item MATCHES "^OpenBLAS::")
    set(text "find_dependency(OpenBLAS)")
  elseif(item MATCHES "^jansson::")
    set(text "find_dependency(jansson)")
  elseif(item MATCHES "^(HDF5|hdf5)::")
    set(text "find_dependency(HDF5 COMPONENTS C HL)")
  elseif(item MATCHES "^OpenMP::")
    set(text "find_dependency(OpenMP COMPONENTS C)")
  elseif(item MATCHES "^MPI::")
    set(text "find_dependency(MPI COMPONENTS C)")
  elseif(item MATCHES "^CUDA::")
    get_filename_component(root "${CUDAToolkit_BIN_DIR}/.." ABSOLUTE)
    set(text "if(NOT CUDAToolkit_ROOT AND EXISTS \"${root}\")\n  set(CUDAToolkit_ROOT \"${root}\")\nendif()\nfind_dependency(CUDAToolkit)")
  elseif(item MATCHES "^PkgConfig::(.+)$")
    # pkg_check_modules(<prefix> ... IMPORTED_TARGET): ask pkg-config again with the same modules.
    set(prefix "${CMAKE_MATCH_1}")
    set(args "${__pkg_config_arguments_${prefix}}")
    list(FILTER args EXCLUDE REGEX "^(REQUIRED|QUIET|IMPORTED_TARGET|GLOBAL|NO_CMAKE_PATH|NO_CMAKE_ENVIRONMENT_PATH)$")
    if(NOT args AND ${prefix}_MODULE_NAME)
      set(args "${${prefix}_MODULE_NAME}")
    endif()
    list(JOIN args " " args)
    set(text "find_dependency(PkgConfig)\nif(NOT TARGET ${item})\n  pkg_check_modules(${prefix} REQUIRED QUIET IMPORTED_TARGET ${args})\nendif()")
  elseif(item MATCHES "^ct::")
    # Our own imported targets (cuDNN, NCCL, protobuf-c, ...): re-created from what was found here.
    get_target_property(loc ${item} IMPORTED_LOCATION)
    get_target_property(inc ${item} INTERFACE_INCLUDE_DIRECTORIES)
    get_target_property(libs ${item} INTERFACE_LINK_LIBRARIES)
    set(text "if(NOT TARGET ${item})\n  add_library(${item} UNKNOWN IMPORTED)\n  set_target_properties(${item} PROPERTIES IMPORTED_LOCATION \"${loc}\")")
    if(inc)
      string(APPEND text "\n  set_target_properties(${item} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"${inc}\")")
    endif()
    if(libs)
      string(APPEND text "\n  set_target_properties(${item} PROPERTIES INTERFACE_LINK_LIBRARIES \"${libs}\")")
    endif()
    string(APPEND text "\nendif()")
  elseif(item MATCHES "^([A-Za-z0-9_.+-]+)::")
    set(text "find_dependency(${CMAKE_MATCH_1})")
  else()
    get_target_property(imported ${item} IMPORTED)
    if(NOT imported)
      message(FATAL_ERROR "ctrainer install: ctrainer_objects links the build-tree target '${item}', which an "
                          "installed ctrainer cannot name: add its sources to ctrainer_objects instead")
    endif()
    message(FATAL_ERROR "ctrainer install: no way to find the imported target '${item}' from ctrainerConfig.cmake; "
                        "give it a namespace (ct::${item}) or teach cmake/CtrainerInstall.cmake about it")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

set(CT_CONFIG_DEPENDENCIES "")
set(_ct_done)
foreach(_dep IN LISTS _ct_deps)
  _ct_find_dependency_text("${_dep}" _text)
  if(_text AND NOT _text IN_LIST _ct_done)
    list(APPEND _ct_done "${_text}")
    string(APPEND CT_CONFIG_DEPENDENCIES "${_text}\n")
  endif()
endforeach()

# --- pkg-config ------------------------------------------------------------------------------------------
find_package(PkgConfig QUIET)

# The link arguments of `item` as a flat list: library files, -l names and flags, through the imported
# targets it names (depth-limited: imported targets do not form cycles, but a bad one must not hang us).
function(_ct_flatten item depth out)
  set(result)
  if(item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(item "${CMAKE_MATCH_1}")
  endif()
  if(item MATCHES "^\\$<" OR depth GREATER 8)
    set(${out} "" PARENT_SCOPE) # other generator expressions are build-tree matters
    return()
  endif()
  if(TARGET "${item}")
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      set(item ${aliased})
    endif()
    get_target_property(type ${item} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(loc ${item} IMPORTED_LOCATION)
      if(NOT loc)
        get_target_property(configs ${item} IMPORTED_CONFIGURATIONS)
        if(configs)
          list(GET configs 0 config)
          get_target_property(loc ${item} IMPORTED_LOCATION_${config})
        endif()
      endif()
      if(loc)
        list(APPEND result "${loc}")
      endif()
    endif()
    get_target_property(opts ${item} INTERFACE_LINK_OPTIONS)
    if(opts)
      list(APPEND result ${opts})
    endif()
    get_target_property(libs ${item} INTERFACE_LINK_LIBRARIES)
    if(libs)
      math(EXPR depth "${depth} + 1")
      foreach(lib IN LISTS libs)
        _ct_flatten("${lib}" ${depth} sub)
        list(APPEND result ${sub})
      endforeach()
    endif()
  elseif(item)
    list(APPEND result "${item}")
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# A link argument as pkg-config writes it: /dir/libfoo.so -> -L/dir -lfoo (no -L for the compiler's own
# directories), m -> -lm; static archives and flags stay as they are.
function(_ct_pc_link_args arg out)
  if(arg MATCHES "^/.*/lib([^/]+)\\.so(\\.[0-9.]+)?$")
    set(name "${CMAKE_MATCH_1}")
    get_filename_component(dir "${arg}" DIRECTORY)
    if(dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      set(${out} "-l${name}" PARENT_SCOPE)
    else()
      set(${out} "-L${dir};-l${name}" PARENT_SCOPE)
    endif()
  elseif(arg MATCHES "^[A-Za-z0-9_.+]+$")
    set(${out} "-l${arg}" PARENT_SCOPE)
  else()
    set(${out} "${arg}" PARENT_SCOPE)
  endif()
endfunction()

# The first of `candidates` whose pkg-config --libs links the library file `lib` (same name, same
# directory), or "".
function(_ct_pc_module_for lib candidates out)
  set(${out} "" PARENT_SCOPE)
  if(NOT PKG_CONFIG_EXECUTABLE OR NOT lib MATCHES "^/.*/lib([^/]+)\\.(so|a)(\\.[0-9.]+)?$")
    return()
  endif()
  set(name "${CMAKE_MATCH_1}")
  get_filename_component(dir "${lib}" DIRECTORY)
  get_filename_component(dir "${dir}" REALPATH)
  foreach(mod IN LISTS candidates)
    execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --libs ${mod} OUTPUT_VARIABLE flags ERROR_QUIET
                    RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT rc EQUAL 0)
      continue()
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    if(NOT "-l${name}" IN_LIST flags)
      continue()
    endif()
    set(dir_ok FALSE)
    if(dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      set(dir_ok TRUE)
    endif()
    foreach(f IN LISTS flags)
      if(f MATCHES "^-L(.+)$")
        get_filename_component(d "${CMAKE_MATCH_1}" REALPATH)
        if(d STREQUAL dir)
          set(dir_ok TRUE)
        endif()
      endif()
    endforeach()
    if(dir_ok)
      set(${out} "${mod}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Each dependency: its pkg-config module, or its libraries and flags.
set(_ct_pc_requires)
set(_ct_pc_requires_private)
set(_ct_pc_libs)
set(_ct_pc_libs_private)
foreach(_dep IN LISTS _ct_deps)
  set(_public FALSE)
  if(_dep IN_LIST CT_INTERFACE_DEPS)
    set(_public TRUE)
  endif()
  set(_name "${_dep}")
  if(_name MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(_name "${CMAKE_MATCH_1}")
  endif()
  if(_name MATCHES "^OpenMP::")
    # The compiler's own flag links its runtime (-fopenmp: libgomp), as the objects were compiled.
    list(APPEND _ct_pc_libs_private ${OpenMP_C_FLAGS})
    continue()
  endif()
  _ct_flatten("${_dep}" 0 _leaves)
  set(_primary "")
  foreach(_leaf IN LISTS _leaves)
    if(_leaf MATCHES "^/.*/lib[^/]+\\.(so|a)(\\.[0-9.]+)?$")
      set(_primary "${_leaf}")
      break()
    endif()
  endforeach()
  set(_candidates)
  if(_name MATCHES "^(HDF5|hdf5)::")
    list(APPEND _candidates hdf5 hdf5-serial)
  elseif(_name MATCHES "^MPI::")
    list(APPEND _candidates ompi-c mpich mpi-c mpi)
  elseif(_name MATCHES "^ZLIB::")
    list(APPEND _candidates zlib)
  elseif(_name MATCHES "^PkgConfig::(.+)$")
    set(_args "${__pkg_config_arguments_${CMAKE_MATCH_1}}")
    list(FILTER _args EXCLUDE REGEX "^(REQUIRED|QUIET|IMPORTED_TARGET|GLOBAL|NO_CMAKE_PATH|NO_CMAKE_ENVIRONMENT_PATH)$")
    list(APPEND _candidates ${_args})
  endif()
  if(_primary MATCHES "/lib([^/]+)\\.(so|a)")
    list(APPEND _candidates "${CMAKE_MATCH_1}" "lib${CMAKE_MATCH_1}")
  endif()
  _ct_pc_module_for("${_primary}" "${_candidates}" _module)
  if(_module)
    if(_public)
      list(APPEND _ct_pc_requires ${_module})
    else()
      list(APPEND _ct_pc_requires_private ${_module})
    endif()
    continue()
  endif()
  foreach(_leaf IN LISTS _leaves)
    _ct_pc_link_args("${_leaf}" _args)
    if(_public)
      list(APPEND _ct_pc_libs ${_args})
    else()
      list(APPEND _ct_pc_libs_private ${_args})
    endif()
  endforeach()
endforeach()
foreach(_v _ct_pc_requires _ct_pc_requires_private _ct_pc_libs _ct_pc_libs_private)
  if(${_v})
    list(REMOVE_DUPLICATES ${_v})
  endif()
endforeach()
if(_ct_pc_requires_private AND _ct_pc_requires)
  list(REMOVE_ITEM _ct_pc_requires_private ${_ct_pc_requires})
endif()
list(JOIN _ct_pc_requires " " CT_PC_REQUIRES)
list(JOIN _ct_pc_requires_private " " CT_PC_REQUIRES_PRIVATE)
list(JOIN _ct_pc_libs " " CT_PC_LIBS)
list(JOIN _ct_pc_libs_private " " CT_PC_LIBS_PRIVATE)
# prefix relative to the .pc file, so an installed tree can move (and --prefix at install time works).
if(IS_ABSOLUTE "${CTRAINER_INSTALL_PKGCONFIGDIR}")
  set(CT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _rel "/ct-prefix/${CTRAINER_INSTALL_PKGCONFIGDIR}" "/ct-prefix")
  string(REGEX REPLACE "/$" "" _rel "${_rel}")
  set(CT_PC_PREFIX "\${pcfiledir}/${_rel}")
endif()
foreach(_d LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_d}}")
    set(CT_PC_${_d} "${CMAKE_INSTALL_${_d}}")
  else()
    set(CT_PC_${_d} "\${prefix}/${CMAKE_INSTALL_${_d}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/ctrainer.pc.in ${PROJECT_BINARY_DIR}/ctrainer.pc @ONLY)

# --- CMake package ---------------------------------------------------------------------------------------
set(CT_CONFIG_CUDA ${CTRAINER_CUDA_ENABLED})
set(CT_CONFIG_MPI ${CTRAINER_MPI_ENABLED})
set(CT_CONFIG_TENSORBOARD ${CTRAINER_TENSORBOARD_ENABLED})
set(CT_CONFIG_PLOT ${CTRAINER_PLOT_ENABLED})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ctrainerConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ctrainerConfig.cmake
                              INSTALL_DESTINATION ${CTRAINER_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ctrainerConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

# --- what goes where -------------------------------------------------------------------------------------
install(TARGETS ctrainer_shared ctrainer_static EXPORT ctrainerTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT devel
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS ctrainer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
if(CTRAINER_CUDA_ENABLED)
  # the CUDA backend's module, which the library opens from the install lib folder when a GPU is used
  install(TARGETS ctrainer_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
install(EXPORT ctrainerTargets NAMESPACE ctrainer:: DESTINATION ${CTRAINER_INSTALL_CMAKEDIR} COMPONENT devel)
install(FILES ${PROJECT_BINARY_DIR}/ctrainerConfig.cmake ${PROJECT_BINARY_DIR}/ctrainerConfigVersion.cmake
        DESTINATION ${CTRAINER_INSTALL_CMAKEDIR} COMPONENT devel)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindOpenBLAS.cmake ${PROJECT_SOURCE_DIR}/cmake/Findjansson.cmake
        DESTINATION ${CTRAINER_INSTALL_CMAKEDIR}/modules COMPONENT devel)
install(FILES ${PROJECT_BINARY_DIR}/ctrainer.pc DESTINATION ${CTRAINER_INSTALL_PKGCONFIGDIR} COMPONENT devel)

set(_ct_include ${CMAKE_INSTALL_INCLUDEDIR}/ctrainer)
install(FILES ${PROJECT_SOURCE_DIR}/include/ctrainer/ctrainer.h
              ${PROJECT_BINARY_DIR}/include/ctrainer/ctrainer_version.h
        DESTINATION ${_ct_include} COMPONENT devel)
foreach(_area ${CT_AREAS})
  file(GLOB _headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${_area}/*.h)
  list(FILTER _headers EXCLUDE REGEX "_(impl|tmpl)\\.h$")
  if(_headers)
    list(REMOVE_ITEM _headers ${CT_PRIVATE_HEADERS})
  endif()
  list(TRANSFORM _headers PREPEND ${PROJECT_SOURCE_DIR}/)
  if(_headers)
    install(FILES ${_headers} DESTINATION ${_ct_include}/${_area} COMPONENT devel)
  endif()
endforeach()

# --- the man page ----------------------------------------------------------------------------------------
# ctrainer.1 from `ctrainer --help` and every subcommand's --help: cmake/CtrainerManPage.cmake runs the
# CLI just built. Where it cannot run (cross-compiling, or its libraries are found only through an
# environment the build lacks) there is no page to install, with a warning, and the build goes on.
if(NOT CMAKE_CROSSCOMPILING)
  set(_ct_man ${PROJECT_BINARY_DIR}/man/ctrainer.1)
  add_custom_command(OUTPUT ${_ct_man}.stamp BYPRODUCTS ${_ct_man}
                     COMMAND ${CMAKE_COMMAND} -DCTRAINER=$<TARGET_FILE:ctrainer> -DOUT=${_ct_man}
                             -DVERSION=${PROJECT_VERSION} -P ${PROJECT_SOURCE_DIR}/cmake/CtrainerManPage.cmake
                     DEPENDS ctrainer ${PROJECT_SOURCE_DIR}/cmake/CtrainerManPage.cmake
                     COMMENT "man page ctrainer.1 from the CLI's --help" VERBATIM)
  add_custom_target(ctrainer_man ALL DEPENDS ${_ct_man}.stamp)
  install(FILES ${_ct_man} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime OPTIONAL)
endif()

# --- tests -----------------------------------------------------------------------------------------------
# install.package: install this build into a temporary prefix and build a separate project against it
# (find_package and pkg-config, shared and static). cli.help_every_command: every command that
# `ctrainer --help` lists answers --help with its usage.
if(CTRAINER_TESTS)
  set(_ct_extra_ldflags "")
  if(CTRAINER_SANITIZE)
    set(_ct_extra_ldflags "-fsanitize=address,undefined")
  endif()
  add_test(NAME install.package
           COMMAND ${PROJECT_SOURCE_DIR}/tests/install/test_install.sh ${CMAKE_COMMAND} ${PROJECT_BINARY_DIR}
                   ${PROJECT_VERSION} ${CMAKE_C_COMPILER} "${_ct_extra_ldflags}")
  set_tests_properties(install.package PROPERTIES LABELS install TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=1")
  add_test(NAME cli.help_every_command
           COMMAND ${PROJECT_SOURCE_DIR}/tests/install/test_help.sh $<TARGET_FILE:ctrainer>)
  set_tests_properties(cli.help_every_command PROPERTIES LABELS "cli;install")
endif()
