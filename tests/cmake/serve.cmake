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

# The daemon beside capture processes (tests/serve_e2e.sh, tests/serve_client.c): two capture at once, a third
# is killed after sealing; every record in the catalog once, the lease free, fsck clean. On the embedded
# defaults, and on the npm S3 server and ClickHouse 18.16.
add_test(NAME cli.serve.e2e
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_e2e.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:serve_client>
          ${CMAKE_CURRENT_BINARY_DIR}/serve_e2e)
set_tests_properties(cli.serve.e2e PROPERTIES LABELS "runtime;cli" TIMEOUT 180)
add_test(NAME live.serve.servers
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_e2e.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:serve_client>
          ${CMAKE_CURRENT_BINARY_DIR}/serve_e2e_servers ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint
          ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.serve.servers PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;runtime;cli"
                     RESOURCE_LOCK clickhouse TIMEOUT 300)
