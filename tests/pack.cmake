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
# CRC-32 through Intel ISA-L (Debian libisal-dev) when present: the same
# function as zlib's crc32 with carry-less multiplication, an order of
# magnitude faster. zlib stays the reference and the fallback.
pkg_check_modules(ISAL IMPORTED_TARGET libisal)
if(ISAL_FOUND)
  target_link_libraries(capstore PUBLIC PkgConfig::ISAL)
  target_compile_definitions(capstore PRIVATE CAPSTORE_HAVE_ISAL=1)
else()
  message(STATUS "ISA-L not found (Debian: libisal-dev): CRC-32 uses zlib")
  target_compile_definitions(capstore PRIVATE CAPSTORE_HAVE_ISAL=0)
endif()

# The pack unit tests need only the library (not the simulator), and read the
# reference writer's golden packs.
file(GLOB PACK_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_pack*.c)
foreach(src ${PACK_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  set_property(TARGET ${name} PROPERTY LINK_LIBRARIES capstore PkgConfig::CMOCKA)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src/pack)
  target_compile_definitions(${name} PRIVATE
    CS_PACK_GOLDEN_DIR="${CMAKE_CURRENT_SOURCE_DIR}/pack_ref/golden")
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;pack")
endforeach()

# The pack commands against hostile paths: planted links, payload files from
# outside the spec's directory, FIFOs (tests/pack_cli.sh). The LD_PRELOAD shim
# makes pack build lose its check-then-open race on purpose.
add_library(pack_race_shim MODULE ${CMAKE_CURRENT_SOURCE_DIR}/pack_race_shim.c)
target_link_libraries(pack_race_shim PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME cli.pack
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/pack_cli.sh $<TARGET_FILE:capstore_cli>
          ${CMAKE_CURRENT_BINARY_DIR}/pack_cli $<TARGET_FILE:pack_race_shim>)
set_tests_properties(cli.pack PROPERTIES LABELS "pack;cli" TIMEOUT 120)

# Byte-for-byte compatibility with the Python reference writer (stdlib only).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME pack.compat
    COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/pack_ref/compat_test.py
            $<TARGET_FILE:capstore_cli> ${CMAKE_CURRENT_BINARY_DIR}/pack_compat)
  set_tests_properties(pack.compat PROPERTIES LABELS pack TIMEOUT 300)
  # The object key's date against Python's datetime, DMI's rule (tests/pack_key_dates.c).
  add_executable(pack_key_dates ${CMAKE_CURRENT_SOURCE_DIR}/pack_key_dates.c)
  target_link_libraries(pack_key_dates PRIVATE capstore)
  add_test(NAME pack.key_dates
    COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/pack_ref/key_date_test.py
            $<TARGET_FILE:pack_key_dates>)
  set_tests_properties(pack.key_dates PROPERTIES LABELS pack TIMEOUT 300)
else()
  message(WARNING "python3 not found: the pack compatibility test is not registered")
endif()
