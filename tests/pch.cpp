// Builds the tests' shared precompiled header (tests/CMakeLists.txt); no code of its own.
