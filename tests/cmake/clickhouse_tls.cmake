# The ClickHouse adapter against peers where TLS fails (tests/adapter_test_clickhouse_tls.c):
# no server, the peers are threads of the test on 127.0.0.1.
add_executable(adapter_test_clickhouse_tls ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_clickhouse_tls.c)
target_link_libraries(adapter_test_clickhouse_tls PRIVATE capstore_runtime PkgConfig::CMOCKA OpenSSL::SSL
                      Threads::Threads)
add_test(NAME adapter.clickhouse_tls COMMAND adapter_test_clickhouse_tls)
set_tests_properties(adapter.clickhouse_tls PROPERTIES LABELS adapters TIMEOUT 60)
