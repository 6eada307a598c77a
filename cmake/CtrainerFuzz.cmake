# Fuzz targets (CTRAINER_FUZZ=ON, clang only; docs/fuzzing.md): the library's objects are compiled
# with -fsanitize=fuzzer-no-link,address,undefined (coverage for libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer, any UB aborting), and every fuzz/fuzz_*.c becomes a libFuzzer program
# in <build>/fuzz/. Included by the top-level CMakeLists.txt before the library's targets are
# defined, so that the flags reach every object; the fuzz directory is added at the end.
#
#   CC=clang cmake -B build-fuzz -DCTRAINER_FUZZ=ON -DCTRAINER_CUDA=OFF -DCTRAINER_MPI=OFF -DCTRAINER_ONEDNN=OFF \
#         -DCTRAINER_TESTS=OFF -DCTRAINER_BENCH=OFF -DCTRAINER_TENSORBOARD=OFF -DCTRAINER_PLOT=OFF
#
# scripts/fuzz.sh does exactly that and runs every target for a while.

if(NOT CTRAINER_FUZZ)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "CTRAINER_FUZZ needs clang (libFuzzer): configure a fresh build directory with CC=clang "
                      "(Debian: apt-get install clang libclang-rt-14-dev libomp-14-dev); this one uses "
                      "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER}")
endif()
if(CTRAINER_SANITIZE)
  message(FATAL_ERROR "CTRAINER_FUZZ already builds with AddressSanitizer and UBSan: leave CTRAINER_SANITIZE off")
endif()

# -Wno-unknown-warning-option: the project's gcc-only -Wno-format-truncation.
# -fno-sanitize-recover: any UB report ends the run, so libFuzzer records it as a crash with its input.
add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=fuzzer-no-link,address,undefined>
                    $<$<COMPILE_LANGUAGE:C>:-fno-sanitize-recover=undefined>
                    $<$<COMPILE_LANGUAGE:C>:-fno-omit-frame-pointer>
                    $<$<COMPILE_LANGUAGE:C>:-g>
                    $<$<COMPILE_LANGUAGE:C>:-Wno-unknown-warning-option>)
add_link_options(-fsanitize=address,undefined)
