# Optional training curves for `ctrainer plot` and the model card (report/plot*.c,
# report/model_card.c): CTRAINER_PLOT=AUTO draws them with cairo (its PNG and SVG surfaces) and
# fontconfig where pkg-config finds both, ON requires them, OFF leaves them out.
#
# Without them, report/cairo/plot_off.c replaces report/cairo/plot.c (the drawing; the figure's data and axes,
# report/plot_series.c and plot_axis.c, need no cairo and stay): ct_plot_training_curves answers
# CT_ERR_UNSUPPORTED and ct_plot_cairo_version NULL, so `ctrainer plot` exits 1 with a message and the
# model card is written without its figure, saying why; unit.test_plot and
# oracle.test_plot skip. Defines CTRAINER_PLOT_ENABLED and, when ON, CT_HAVE_PLOT=1 for
# ctrainer_objects and everything built on it. Included by the top-level CMakeLists.txt right after
# ctrainer_objects is defined (it adds one of the two sources to the objects).

set(CTRAINER_PLOT_ENABLED OFF)

# Leaves `file` out of ctrainer_objects (the areas' sources are globbed, both variants with them).
# The model card names the ctrainer version that trained the model.
set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/report/model_card.c APPEND PROPERTY
             COMPILE_DEFINITIONS CT_VERSION="${PROJECT_VERSION}")

if(CTRAINER_PLOT STREQUAL "OFF")
  message(STATUS "ctrainer: training curves disabled (CTRAINER_PLOT=OFF): no `ctrainer plot`, model cards without figures")
  target_sources(ctrainer_objects PRIVATE report/cairo/plot_off.c)
  return()
endif()

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(CT_CAIRO QUIET IMPORTED_TARGET cairo)
  # called directly to release its caches at the end (ct_plot_release_fonts); cairo depends on it
  pkg_check_modules(CT_FONTCONFIG QUIET IMPORTED_TARGET fontconfig)
endif()
if(NOT CT_CAIRO_FOUND OR NOT CT_FONTCONFIG_FOUND)
  if(CTRAINER_PLOT STREQUAL "ON")
    message(FATAL_ERROR "CTRAINER_PLOT=ON, but cairo or fontconfig was not found (pkg-config cairo fontconfig), and ctrainer "
                        "needs them to draw training curves (`ctrainer plot`, the model card). Install them with: "
                        "apt-get install libcairo2-dev pkg-config (scripts/setup.sh does), point PKG_CONFIG_PATH at a "
                        "cairo installation, or build without curves: -DCTRAINER_PLOT=OFF.")
  endif()
  message(STATUS "ctrainer: cairo or fontconfig not found (pkg-config cairo fontconfig), building without training curves "
                 "(no `ctrainer plot`, model cards without figures; -DCTRAINER_PLOT=ON requires them)")
  target_sources(ctrainer_objects PRIVATE report/cairo/plot_off.c)
  return()
endif()
target_sources(ctrainer_objects PRIVATE report/cairo/plot.c)
set(CTRAINER_PLOT_ENABLED ON)
message(STATUS "ctrainer: training curves (PNG, SVG) with cairo ${CT_CAIRO_VERSION}")
target_compile_definitions(ctrainer_objects PUBLIC CT_HAVE_PLOT=1)
target_link_libraries(ctrainer_objects PUBLIC PkgConfig::CT_CAIRO PkgConfig::CT_FONTCONFIG)
