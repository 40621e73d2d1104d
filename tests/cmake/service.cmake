# The service runtime end to end (issue 11): real capture processes (capstore_rt_fixture) against
# a dirstore and SQLite (no server), and against ClickHouse 18.16 and the npm S3 server, each
# behind a TCP fault switch (tests/live_service.py). 50 kill -9 runs of each kind.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME live.service.embedded
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/live_service.py
          --fixture $<TARGET_FILE:capstore_rt_fixture> --backend embedded --runs 50)
set_tests_properties(live.service.embedded PROPERTIES LABELS "live;runtime" TIMEOUT 900 SKIP_RETURN_CODE 77)
add_test(NAME live.service.servers
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/live_service.py
          --fixture $<TARGET_FILE:capstore_rt_fixture> --backend servers --runs 50
          --clickhouse ${CAPSTORE_LIVE_DIR}/clickhouse/endpoint --s3 ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.service.servers PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;runtime"
                     RESOURCE_LOCK clickhouse TIMEOUT 900 SKIP_RETURN_CODE 77)
# The same capture processes on a replicated catalog (three ClickHouse 18.16 replicas and ZooKeeper,
# each replica behind a switch of its own): every scenario, and a publisher failing over from replica
# to replica while quorum writes time out and land late (scenario failover). 8 runs of each kind.
add_test(NAME live.service.cluster
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/live_service.py
          --fixture $<TARGET_FILE:capstore_rt_fixture> --backend cluster --runs 8
          --cluster ${CAPSTORE_LIVE_DIR}/ch_cluster --s3 ${CAPSTORE_LIVE_DIR}/s3/endpoint)
set_tests_properties(live.service.cluster PROPERTIES FIXTURES_REQUIRED "ch_cluster;s3" LABELS "live;runtime;cluster"
                     RESOURCE_LOCK ch_cluster TIMEOUT 900 SKIP_RETURN_CODE 77)
