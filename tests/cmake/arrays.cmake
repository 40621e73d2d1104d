# Capture arrays (issue 17, docs/arrays.md): the Blosc chunk codec against
# python3-blosc, both ways (tests/blosc_python_check.py): python3-blosc decodes
# the chunks capstore writes, and capstore decodes, whole and block by block,
# the chunks python3-blosc writes with every codec, shuffle and item size; and
# python3-blosc decodes a stored array chunk's payload from its first cbytes.
if(CAPSTORE_FUZZ)
  return()
endif()
if(EXISTS /usr/bin/python3)
  set(CAPSTORE_ARRAYS_PYTHON /usr/bin/python3)
else()
  find_program(CAPSTORE_ARRAYS_PYTHON python3 REQUIRED)
endif()
add_test(NAME arrays.blosc_python
         COMMAND ${CAPSTORE_ARRAYS_PYTHON} ${CMAKE_SOURCE_DIR}/tests/blosc_python_check.py
                 $<TARGET_FILE:test_blosc_chunk> $<TARGET_FILE:test_array_chunk>)
set_tests_properties(arrays.blosc_python PROPERTIES LABELS "arrays;runtime" TIMEOUT 300)

# 8 writer processes beside `capstore serve` fill one array, raw and Blosc (tests/arrays_live.sh,
# tests/array_client.c): contested slots won once, every chunk read back equal, python3-blosc decodes a stored
# chunk. On the embedded defaults (claims enforced) and on the npm S3 server + ClickHouse (catalog arbitration).
add_test(NAME arrays.live_fill
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/arrays_live.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:array_client>
          ${CMAKE_CURRENT_BINARY_DIR}/arrays_live)
set_tests_properties(arrays.live_fill PROPERTIES LABELS "arrays;runtime" TIMEOUT 300)
