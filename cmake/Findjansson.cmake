# Finds jansson (Debian's libjansson-dev ships only a pkg-config file) as the target jansson::jansson.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_JANSSON QUIET jansson)
endif()
find_path(JANSSON_INCLUDE_DIR jansson.h HINTS ${PC_JANSSON_INCLUDE_DIRS})
find_library(JANSSON_LIBRARY NAMES jansson HINTS ${PC_JANSSON_LIBRARY_DIRS})
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(jansson REQUIRED_VARS JANSSON_LIBRARY JANSSON_INCLUDE_DIR)
if(jansson_FOUND AND NOT TARGET jansson::jansson)
  add_library(jansson::jansson UNKNOWN IMPORTED)
  set_target_properties(jansson::jansson PROPERTIES IMPORTED_LOCATION "${JANSSON_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${JANSSON_INCLUDE_DIR}")
endif()
