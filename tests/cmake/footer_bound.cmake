# The footer memory bound from the command line: 64 MiB footers of the
# costliest shapes, each refused as footer_complex under a 640 MiB
# address-space limit (tests/pack_ref/worst_footers.py, docs/format.md §7).
# Not under AddressSanitizer, whose shadow memory no such limit admits.
if(NOT CAPSTORE_SANITIZE)
  add_test(NAME pack.worst_footers
    COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/../pack_ref/worst_footers.py $<TARGET_FILE:capstore_cli>
            ${CMAKE_CURRENT_BINARY_DIR}/worst_footers)
  set_tests_properties(pack.worst_footers PROPERTIES LABELS "pack;cli" TIMEOUT 300)
endif()
