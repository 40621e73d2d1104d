# Pack format (dmi-pack-v1): its library dependencies, unit-test fixtures and
# the compatibility test against the Python reference writer.
#
# The root CMakeLists builds src/pack/*.c into `capstore`; the pack code needs
# OpenSSL's libcrypto (SHA-256) and zlib (CRC-32) besides jansson. CMake >= 3.13
# lets this directory attach them to `capstore` (policy CMP0079), so every
# consumer of the library links them.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(ZLIB REQUIRED)
if(NOT JANSSON_FOUND)
  message(FATAL_ERROR "the pack reader needs jansson (Debian: libjansson-dev)")
endif()
target_link_libraries(capstore PUBLIC OpenSSL::Crypto ZLIB::ZLIB)
