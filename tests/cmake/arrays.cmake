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
