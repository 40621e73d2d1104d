# Live adapter tests (issue 4): real servers started and stopped by ctest
# fixtures (tools/servers/*.sh), loopback only, data under the build tree.
# LABELS: adapters (no server needed), live (a server fixture).
set(CAPSTORE_LIVE_DIR ${CMAKE_BINARY_DIR}/live)

add_test(NAME live.clickhouse.start
         COMMAND ${CMAKE_SOURCE_DIR}/tools/servers/clickhouse.sh start ${CAPSTORE_LIVE_DIR}/clickhouse)
add_test(NAME live.clickhouse.stop
         COMMAND ${CMAKE_SOURCE_DIR}/tools/servers/clickhouse.sh stop ${CAPSTORE_LIVE_DIR}/clickhouse)
set_tests_properties(live.clickhouse.start PROPERTIES FIXTURES_SETUP clickhouse LABELS live)
set_tests_properties(live.clickhouse.stop PROPERTIES FIXTURES_CLEANUP clickhouse LABELS live)

add_executable(adapter_test_clickhouse ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_clickhouse.c)
target_link_libraries(adapter_test_clickhouse PRIVATE capstore_runtime PkgConfig::CMOCKA)
target_include_directories(adapter_test_clickhouse PRIVATE ${CMAKE_SOURCE_DIR}/faults)
add_test(NAME live.clickhouse COMMAND adapter_test_clickhouse ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint)
set_tests_properties(live.clickhouse PROPERTIES FIXTURES_REQUIRED clickhouse LABELS "live;adapters"
                     RESOURCE_LOCK clickhouse TIMEOUT 120)

# The TCP fault switch (faults/tcp_switch.c) runs threads inside the capstore library.
target_link_libraries(capstore PUBLIC Threads::Threads)

add_executable(adapter_test_tcp_switch ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_tcp_switch.c)
target_link_libraries(adapter_test_tcp_switch PRIVATE capstore_runtime PkgConfig::CMOCKA)
target_include_directories(adapter_test_tcp_switch PRIVATE ${CMAKE_SOURCE_DIR}/faults)
add_test(NAME adapter.tcp_switch COMMAND adapter_test_tcp_switch)
set_tests_properties(adapter.tcp_switch PROPERTIES LABELS adapters TIMEOUT 60)

add_executable(adapter_test_clickhouse_parse ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_clickhouse_parse.c)
target_link_libraries(adapter_test_clickhouse_parse PRIVATE capstore_runtime PkgConfig::CMOCKA)
add_test(NAME adapter.clickhouse_parse COMMAND adapter_test_clickhouse_parse)
set_tests_properties(adapter.clickhouse_parse PROPERTIES LABELS adapters)

# The fuzz targets are made in fuzz/ after this file is read: link at the end of the top directory.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _capstore_link_fuzz_clickhouse)
function(_capstore_link_fuzz_clickhouse)
  if(TARGET fuzz_clickhouse)
    target_link_libraries(fuzz_clickhouse PRIVATE capstore_runtime)
  endif()
endfunction()

# The S3 emulator (@20minutes/s3rver, SigV4-verifying) for the S3 adapter's live tests:
# a test needing it sets FIXTURES_REQUIRED s3 and reads ${CAPSTORE_LIVE_DIR}/s3/endpoint
# ("endpoint access_key secret bucket").
add_test(NAME live.s3.start COMMAND ${CMAKE_SOURCE_DIR}/tools/servers/s3.sh start ${CAPSTORE_LIVE_DIR}/s3)
add_test(NAME live.s3.stop COMMAND ${CMAKE_SOURCE_DIR}/tools/servers/s3.sh stop ${CAPSTORE_LIVE_DIR}/s3)
set_tests_properties(live.s3.start PROPERTIES FIXTURES_SETUP s3 LABELS live TIMEOUT 120)
set_tests_properties(live.s3.stop PROPERTIES FIXTURES_CLEANUP s3 LABELS live)

# A replicated catalog (issue 18): ZooKeeper and three ClickHouse 18.16 replicas of one shard on loopback
# (tools/servers/ch_cluster.sh); tests needing it set FIXTURES_REQUIRED ch_cluster and RESOURCE_LOCK ch_cluster.
# (a cluster a killed run left behind is stopped first)
add_test(NAME live.ch_cluster.start
         COMMAND sh -c "'${CMAKE_SOURCE_DIR}/tools/servers/ch_cluster.sh' stop '${CAPSTORE_LIVE_DIR}/ch_cluster' && '${CMAKE_SOURCE_DIR}/tools/servers/ch_cluster.sh' start '${CAPSTORE_LIVE_DIR}/ch_cluster' 3")
add_test(NAME live.ch_cluster.stop COMMAND ${CMAKE_SOURCE_DIR}/tools/servers/ch_cluster.sh stop ${CAPSTORE_LIVE_DIR}/ch_cluster)
set_tests_properties(live.ch_cluster.start PROPERTIES FIXTURES_SETUP ch_cluster LABELS live TIMEOUT 120)
set_tests_properties(live.ch_cluster.stop PROPERTIES FIXTURES_CLEANUP ch_cluster LABELS live)

# The catalog conformance suite (tests/conformance_catalog.c) on the live ClickHouse.
if(TARGET capstore_conformance)
  add_executable(adapter_test_clickhouse_conformance ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_clickhouse_conformance.c)
  target_link_libraries(adapter_test_clickhouse_conformance PRIVATE capstore_conformance capstore_runtime
                        PkgConfig::CMOCKA)
  add_test(NAME live.clickhouse_conformance
           COMMAND adapter_test_clickhouse_conformance ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint)
  set_tests_properties(live.clickhouse_conformance PROPERTIES FIXTURES_REQUIRED clickhouse LABELS "live;adapters"
                       RESOURCE_LOCK clickhouse TIMEOUT 180)
  # The replicated catalog's races (a replica lagging or down, ZooKeeper down, quorum writes landing late).
  add_executable(adapter_test_clickhouse_cluster ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_clickhouse_cluster.c)
  target_link_libraries(adapter_test_clickhouse_cluster PRIVATE capstore_runtime PkgConfig::CMOCKA Threads::Threads)
  add_test(NAME live.ch_cluster_races
           COMMAND adapter_test_clickhouse_cluster ${CAPSTORE_LIVE_DIR}/ch_cluster
                   ${CMAKE_SOURCE_DIR}/tools/servers/ch_cluster.sh)
  set_tests_properties(live.ch_cluster_races PROPERTIES FIXTURES_REQUIRED ch_cluster
                       LABELS "live;adapters;cluster" RESOURCE_LOCK ch_cluster TIMEOUT 400)
  # The same suite on the replicated catalog, each case's two connections on two replicas.
  add_test(NAME live.ch_cluster_conformance
           COMMAND adapter_test_clickhouse_conformance --cluster ${CAPSTORE_LIVE_DIR}/ch_cluster)
  set_tests_properties(live.ch_cluster_conformance PROPERTIES FIXTURES_REQUIRED ch_cluster
                       LABELS "live;adapters;cluster" RESOURCE_LOCK ch_cluster TIMEOUT 300)
endif()

# The reader (tests/test_reader.c) on S3 + ClickHouse: search, paging while publishing, cursors, budgets,
# tampered objects (its dirstore + SQLite run is unit.test_reader).
add_test(NAME live.reader COMMAND test_reader ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.reader PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;runtime"
                     RESOURCE_LOCK clickhouse TIMEOUT 600)

# Capture arrays (tests/test_arrays_api.c) on S3 + ClickHouse: the local S3 server ignores If-None-Match, so the
# catalog arbitrates every slot (its dirstore + SQLite run, where claims are enforced, is unit.test_arrays_api).
add_test(NAME live.arrays COMMAND test_arrays_api ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.arrays PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;runtime;arrays"
                     RESOURCE_LOCK clickhouse TIMEOUT 600)

# 8 writer processes fill one array on S3 + ClickHouse (tests/arrays_live.sh; its embedded run is arrays.live_fill).
add_test(NAME live.arrays_fill
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/arrays_live.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:array_client>
          ${CMAKE_CURRENT_BINARY_DIR}/arrays_live_servers ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint
          ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.arrays_fill PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;arrays;runtime"
                     RESOURCE_LOCK clickhouse TIMEOUT 600)
