# cmake --install: library, headers, CLI, pkg-config and CMake package files.
