# Optional TensorBoard event records: CTRAINER_TENSORBOARD=AUTO builds them where protobuf-c (library,
# header and the protoc-c compiler) is found, ON requires it, OFF leaves them out.
#
# With it, callbacks/tensorboard.proto (TensorFlow's Event / Summary / TensorProto subset) and
# callbacks/tensorboard_hparams.proto (the HParams plugin's) are compiled by protoc-c at build time
# into <build>/generated/callbacks/*.pb-c.{c,h}, which become part of ctrainer_objects; the sources
# include them as "callbacks/tensorboard.pb-c.h". Debian: libprotobuf-c-dev protobuf-c-compiler
# (scripts/setup.sh installs both). Without it, callbacks/tensorboard/tensorboard_off.c replaces
# callbacks/tensorboard/tensorboard.c: the same API (callbacks/tensorboard.h), whose writer and callback answer
# CT_ERR_UNSUPPORTED, so report_to "tensorboard" fails at Trainer init with a message saying how to
# build it in; unit.test_tensorboard and oracle.test_tensorboard skip.
# Defines CTRAINER_TENSORBOARD_ENABLED and, when ON, CT_HAVE_TENSORBOARD=1 for ctrainer_objects and
# everything built on it. Included by the top-level CMakeLists.txt right after ctrainer_objects is
# defined (it adds one of the two sources to the objects).

set(CTRAINER_TENSORBOARD_ENABLED OFF)

# Leaves `file` out of ctrainer_objects (the areas' sources are globbed, both variants with them).
if(CTRAINER_TENSORBOARD STREQUAL "OFF")
  message(STATUS "ctrainer: TensorBoard disabled (CTRAINER_TENSORBOARD=OFF): report_to \"tensorboard\" is refused")
  target_sources(ctrainer_objects PRIVATE callbacks/tensorboard/tensorboard_off.c)
  return()
endif()

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_PROTOBUF_C QUIET libprotobuf-c)
endif()
find_path(PROTOBUF_C_INCLUDE_DIR protobuf-c/protobuf-c.h HINTS ${PC_PROTOBUF_C_INCLUDE_DIRS})
find_library(PROTOBUF_C_LIBRARY NAMES protobuf-c HINTS ${PC_PROTOBUF_C_LIBRARY_DIRS})
find_program(PROTOC_C_EXECUTABLE NAMES protoc-c)
if(NOT EXISTS "${PROTOBUF_C_INCLUDE_DIR}/protobuf-c/protobuf-c.h" OR NOT EXISTS "${PROTOBUF_C_LIBRARY}"
   OR NOT EXISTS "${PROTOC_C_EXECUTABLE}")
  if(CTRAINER_TENSORBOARD STREQUAL "ON")
    message(FATAL_ERROR
      "ctrainer: CTRAINER_TENSORBOARD=ON, but TensorBoard logging needs protobuf-c, which was not found "
      "(library: ${PROTOBUF_C_LIBRARY}, header protobuf-c/protobuf-c.h: ${PROTOBUF_C_INCLUDE_DIR}, "
      "compiler protoc-c: ${PROTOC_C_EXECUTABLE}). On Debian or Ubuntu: "
      "apt-get install libprotobuf-c-dev protobuf-c-compiler (scripts/setup.sh does it). "
      "Elsewhere pass -DPROTOBUF_C_INCLUDE_DIR=..., -DPROTOBUF_C_LIBRARY=... and -DPROTOC_C_EXECUTABLE=..., "
      "or build without TensorBoard: -DCTRAINER_TENSORBOARD=OFF.")
  endif()
  message(STATUS "ctrainer: protobuf-c (libprotobuf-c-dev, protoc-c) not found, building without TensorBoard "
                 "(report_to \"tensorboard\" is refused; -DCTRAINER_TENSORBOARD=ON requires it)")
  target_sources(ctrainer_objects PRIVATE callbacks/tensorboard/tensorboard_off.c)
  return()
endif()
target_sources(ctrainer_objects PRIVATE callbacks/tensorboard/tensorboard.c)
set(CTRAINER_TENSORBOARD_ENABLED ON)
if(NOT TARGET ct::protobuf_c)
  add_library(ct::protobuf_c UNKNOWN IMPORTED)
  set_target_properties(ct::protobuf_c PROPERTIES IMPORTED_LOCATION "${PROTOBUF_C_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PROTOBUF_C_INCLUDE_DIR}")
endif()

set(CT_PROTO_OUT ${CMAKE_BINARY_DIR}/generated)
set(CT_PROTO_SOURCES)
foreach(name tensorboard tensorboard_hparams)
  set(proto ${CMAKE_CURRENT_SOURCE_DIR}/callbacks/${name}.proto)
  set(gen ${CT_PROTO_OUT}/callbacks/${name}.pb-c.c ${CT_PROTO_OUT}/callbacks/${name}.pb-c.h)
  # --proto_path is the source root, so the generated files include each other (and are included)
  # as "callbacks/<name>.pb-c.h", like every other header of the project.
  add_custom_command(
    OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CT_PROTO_OUT}
    COMMAND ${PROTOC_C_EXECUTABLE} --proto_path=${CMAKE_CURRENT_SOURCE_DIR} --c_out=${CT_PROTO_OUT} ${proto}
    DEPENDS ${proto}
    COMMENT "protoc-c callbacks/${name}.proto"
    VERBATIM)
  list(APPEND CT_PROTO_SOURCES ${gen})
endforeach()

target_sources(ctrainer_objects PRIVATE ${CT_PROTO_SOURCES})
# PUBLIC in the build tree: the unit tests decode what the writer wrote with the same messages.
target_include_directories(ctrainer_objects PUBLIC $<BUILD_INTERFACE:${CT_PROTO_OUT}>)
target_compile_definitions(ctrainer_objects PUBLIC CT_HAVE_TENSORBOARD=1)
target_link_libraries(ctrainer_objects PUBLIC ct::protobuf_c)
message(STATUS "ctrainer: TensorBoard event files with protobuf-c (${PROTOBUF_C_LIBRARY}, ${PROTOC_C_EXECUTABLE})")
