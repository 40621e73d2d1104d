# capstore serve (src/cli/cmd_serve.c): its log lines and listen address as a unit
# (tests/test_serve_log.c, compiled with the two CLI files it tests), and the daemon
# itself on the embedded defaults (tests/serve_cli.sh).
target_sources(test_serve_log PRIVATE ${CMAKE_SOURCE_DIR}/src/cli/serve_log.c ${CMAKE_SOURCE_DIR}/src/cli/serve_addr.c)
target_include_directories(test_serve_log PRIVATE ${CMAKE_SOURCE_DIR}/src/cli)
target_link_libraries(test_serve_log PRIVATE Threads::Threads)
set_tests_properties(unit.test_serve_log PROPERTIES LABELS "unit;cli")

add_test(NAME cli.serve
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_cli.sh $<TARGET_FILE:capstore_cli> ${CMAKE_CURRENT_BINARY_DIR}/serve_cli)
set_tests_properties(cli.serve PROPERTIES LABELS "runtime;cli" TIMEOUT 180)
