# Pack format (dmi-pack-v1): unit-test fixtures and the compatibility test
# against the Python reference writer. The pack code's libraries (jansson,
# OpenSSL's libcrypto, zlib, ISA-L when found) are attached to `capstore` in
# the root CMakeLists.txt, where the installed library takes them from too.

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
