# The spool, dirstore, the SQLite catalog and the capture runtime (src/adapters, src/runtime): their unit
# tests link capstore_runtime instead of the simulator.
file(GLOB RUNTIME_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_spool*.c ${CMAKE_CURRENT_SOURCE_DIR}/test_dirstore*.c ${CMAKE_CURRENT_SOURCE_DIR}/test_sqlite*.c
     ${CMAKE_CURRENT_SOURCE_DIR}/test_capture*.c ${CMAKE_CURRENT_SOURCE_DIR}/test_capstore*.c ${CMAKE_CURRENT_SOURCE_DIR}/test_reader*.c
     ${CMAKE_CURRENT_SOURCE_DIR}/test_blosc*.c ${CMAKE_CURRENT_SOURCE_DIR}/test_array_meta.c
     ${CMAKE_CURRENT_SOURCE_DIR}/test_array_chunk.c ${CMAKE_CURRENT_SOURCE_DIR}/test_array_read.c
     ${CMAKE_CURRENT_SOURCE_DIR}/test_arrays_api.c ${CMAKE_CURRENT_SOURCE_DIR}/test_array_winners.c)
foreach(src ${RUNTIME_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  set_property(TARGET ${name} PROPERTY LINK_LIBRARIES capstore_runtime PkgConfig::CMOCKA)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src/runtime)
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;runtime" TIMEOUT 300)
endforeach()

# GPU checks (tests/gpu): built when the CUDA toolkit is found; without a
# device they exit 77 and ctest reports them skipped, never passed.
# tests/gpu/run_gpu_checks.sh builds and runs them on a machine with a GPU.
if(TARGET CUDA::cudart)
  add_executable(test_capture_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_capture_gpu.c)
  target_link_libraries(test_capture_gpu PRIVATE capstore_runtime CUDA::cudart)
  add_test(NAME gpu.capture COMMAND test_capture_gpu)
  set_tests_properties(gpu.capture PROPERTIES LABELS "gpu;runtime" SKIP_RETURN_CODE 77 TIMEOUT 300)
  add_executable(test_service_gpu ${CMAKE_CURRENT_SOURCE_DIR}/gpu/test_service_gpu.c)
  target_link_libraries(test_service_gpu PRIVATE capstore_runtime CUDA::cudart)
  add_test(NAME gpu.service COMMAND test_service_gpu)
  set_tests_properties(gpu.service PROPERTIES LABELS "gpu;runtime" SKIP_RETURN_CODE 77 TIMEOUT 300)
  add_executable(capstore-bench-d2h ${CMAKE_CURRENT_SOURCE_DIR}/gpu/bench_d2h.c)
  target_link_libraries(capstore-bench-d2h PRIVATE capstore_runtime CUDA::cudart)
endif()

# capstore spool list|check|sweep on a real spool made by the capture sink:
# tests/spool_cli.sh with its fixture program (tests/spool_cli_fixture.c).
add_executable(spool_cli_fixture ${CMAKE_CURRENT_SOURCE_DIR}/spool_cli_fixture.c)
target_link_libraries(spool_cli_fixture PRIVATE capstore_runtime)
add_test(NAME cli.spool
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/spool_cli.sh $<TARGET_FILE:capstore_cli>
          $<TARGET_FILE:spool_cli_fixture> ${CMAKE_CURRENT_BINARY_DIR}/spool_cli)
set_tests_properties(cli.spool PROPERTIES LABELS "runtime;cli" TIMEOUT 120)

# capstore demo: the README's first command, on the embedded defaults (tests/demo_cli.sh).
add_library(demo_flip_shim MODULE ${CMAKE_CURRENT_SOURCE_DIR}/demo_flip_shim.c)
target_link_libraries(demo_flip_shim PRIVATE ${CMAKE_DL_LIBS})
add_test(NAME cli.demo
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/demo_cli.sh $<TARGET_FILE:capstore_cli> ${CMAKE_CURRENT_BINARY_DIR}/demo_cli
          $<TARGET_FILE:demo_flip_shim>)
set_tests_properties(cli.demo PROPERTIES LABELS "runtime;cli" TIMEOUT 300)

# capstore config and docs/configuration.md (tests/config_cli.sh).
add_test(NAME cli.config
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/config_cli.sh $<TARGET_FILE:capstore_cli> ${CMAKE_SOURCE_DIR}
          ${CMAKE_CURRENT_BINARY_DIR}/config_cli)
set_tests_properties(cli.config PROPERTIES LABELS "runtime;cli" TIMEOUT 120)

# capstore fsck on states made by capstore demo, one planted inconsistency each (tests/fsck_cli.sh).
add_test(NAME cli.fsck
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fsck_cli.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:spool_cli_fixture>
          ${CMAKE_CURRENT_BINARY_DIR}/fsck_cli)
set_tests_properties(cli.fsck PROPERTIES LABELS "runtime;cli" TIMEOUT 300)

# capstore status on a state made by capstore demo (tests/status_cli.sh).
add_test(NAME cli.status
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/status_cli.sh $<TARGET_FILE:capstore_cli> $<TARGET_FILE:spool_cli_fixture>
          ${CMAKE_CURRENT_BINARY_DIR}/status_cli)
set_tests_properties(cli.status PROPERTIES LABELS "runtime;cli" TIMEOUT 120)

# capstore ls and capstore read on a state made by capstore demo (tests/read_cli.sh).
add_test(NAME cli.read
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/read_cli.sh $<TARGET_FILE:capstore_cli> ${CMAKE_CURRENT_BINARY_DIR}/read_cli)
set_tests_properties(cli.read PROPERTIES LABELS "runtime;cli" TIMEOUT 300)

# The README's C example (examples/quickstart.c) runs as a user would: in a fresh directory, no server.
add_test(NAME example.quickstart
  COMMAND sh -c "rm -rf quickstart && mkdir quickstart && cd quickstart && $<TARGET_FILE:example_quickstart>"
  WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# Its keys are dated by the first record's captured_at_ns: never 1970 (a record left at 0).
set_tests_properties(example.quickstart PROPERTIES LABELS "runtime;example" TIMEOUT 120
  FAIL_REGULAR_EXPRESSION "date=1970-")

# One capture process for the live service tests (tests/live_service.py): capture, serve, check, switch.
add_executable(capstore_rt_fixture ${CMAKE_CURRENT_SOURCE_DIR}/rt_fixture.c)
target_link_libraries(capstore_rt_fixture PRIVATE capstore_runtime)
target_include_directories(capstore_rt_fixture PRIVATE ${CMAKE_SOURCE_DIR}/faults)

# capstore serve with capture processes beside it (tests/serve_cli.sh, tests/serve_client.c).
# Capture arrays from several processes beside the daemon (tests/arrays_live.sh, tests/array_client.c).
add_executable(array_client ${CMAKE_CURRENT_SOURCE_DIR}/array_client.c)
target_link_libraries(array_client PRIVATE capstore_runtime)
add_executable(serve_client ${CMAKE_CURRENT_SOURCE_DIR}/serve_client.c)
target_link_libraries(serve_client PRIVATE capstore_runtime)
