# The adapter conformance suites (tests/conformance_*.c) and the backends they
# run against: the simulator's models, dirstore, SQLite. The ClickHouse and S3
# adapters add their own adapter_test_*.c here, calling the same suites.
add_library(capstore_conformance STATIC ${CMAKE_CURRENT_LIST_DIR}/../conformance_store.c
                                        ${CMAKE_CURRENT_LIST_DIR}/../conformance_catalog.c)
target_link_libraries(capstore_conformance PUBLIC capstore PkgConfig::CMOCKA OpenSSL::Crypto)
target_include_directories(capstore_conformance PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)

foreach(backend model dirstore sqlite)
  set(src ${CMAKE_CURRENT_LIST_DIR}/../adapter_test_${backend}.c)
  if(EXISTS ${src})
    add_executable(adapter_test_${backend} ${src})
    # The store probes live in the runtime (src/adapters/store_probe.c), so every backend links it.
    target_link_libraries(adapter_test_${backend} PRIVATE capstore_conformance capstore_runtime capstore_sim
                          PkgConfig::CMOCKA)
    add_test(NAME adapters.${backend} COMMAND adapter_test_${backend})
    set_tests_properties(adapters.${backend} PROPERTIES LABELS adapters TIMEOUT 120)
  endif()
endforeach()
