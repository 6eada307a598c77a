# Curves for `ctrainer plot` and the model card (trainer/plot*.c, trainer/model_card.c): cairo, for
# its PNG and SVG surfaces, found through pkg-config. It is required: a build without it would lack
# a documented command.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(CT_CAIRO QUIET IMPORTED_TARGET cairo)
  # called directly to release its caches at the end (ct_plot_release_fonts); cairo depends on it
  pkg_check_modules(CT_FONTCONFIG QUIET IMPORTED_TARGET fontconfig)
endif()
if(NOT CT_CAIRO_FOUND OR NOT CT_FONTCONFIG_FOUND)
  message(FATAL_ERROR "cairo or fontconfig was not found (pkg-config cairo fontconfig), and ctrainer needs it to draw training curves "
                      "(`ctrainer plot`, the model card). Install it with: apt-get install libcairo2-dev pkg-config "
                      "(scripts/setup.sh does), or point PKG_CONFIG_PATH at a cairo installation.")
endif()
message(STATUS "cairo ${CT_CAIRO_VERSION}: training curves (PNG, SVG)")
target_link_libraries(ctrainer_objects PUBLIC PkgConfig::CT_CAIRO PkgConfig::CT_FONTCONFIG)
# The model card names the ctrainer version that trained the model.
set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/trainer/model_card.c APPEND PROPERTY
             COMPILE_DEFINITIONS CT_VERSION="${PROJECT_VERSION}")
