# The S3 adapter and its SigV4 signer (src/adapters/sigv4.c, src/adapters/s3*.c).
# The signer is checked against the AWS signing test suite, kept in the repo
# (tests/vectors/sigv4: the 38 cases of aws-c-auth, Apache 2.0, with their
# LICENSE), so a fresh clone tests it; a missing folder fails the test.
set(CAPSTORE_SIGV4_DIR "${CMAKE_SOURCE_DIR}/tests/vectors/sigv4/v4")
add_executable(adapter_test_sigv4 ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_sigv4.c)
target_link_libraries(adapter_test_sigv4 PRIVATE capstore_runtime PkgConfig::CMOCKA PkgConfig::JANSSON)
target_compile_definitions(adapter_test_sigv4 PRIVATE CAPSTORE_SIGV4_DIR="${CAPSTORE_SIGV4_DIR}")
add_test(NAME adapter.sigv4 COMMAND adapter_test_sigv4)
set_tests_properties(adapter.sigv4 PROPERTIES LABELS adapters)

if(TARGET fuzz_sigv4)
  target_link_libraries(fuzz_sigv4 PRIVATE capstore_runtime)
endif()

# The S3 adapter without a server: parsers, encoding, classification, refusal.
add_executable(adapter_test_s3 ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_s3.c)
target_link_libraries(adapter_test_s3 PRIVATE capstore_runtime PkgConfig::CMOCKA)
# curl_multi_perform is wrapped in the test, to fail the transfer engine on demand.
target_link_options(adapter_test_s3 PRIVATE -Wl,--wrap=curl_multi_perform)
add_test(NAME adapter.s3 COMMAND adapter_test_s3)
set_tests_properties(adapter.s3 PROPERTIES LABELS adapters TIMEOUT 60)
if(CAPSTORE_SANITIZE)
  # A request left on the multi handle by a failed synchronous call would be a stack use after return.
  set_tests_properties(adapter.s3 PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_stack_use_after_return=1")
endif()

if(TARGET fuzz_s3_xml)
  target_link_libraries(fuzz_s3_xml PRIVATE capstore_runtime)
endif()

# The S3 adapter against a scripted HTTP server in the test: long session tokens, dot segments,
# LIST answers naming keys outside the prefix, the answer buffer's growth (realloc wrapped, counted),
# transport failures (peers that vanish after a request, refuse TLS or serve a self-signed certificate).
add_executable(adapter_test_s3_wire ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_s3_wire.c)
target_link_libraries(adapter_test_s3_wire PRIVATE capstore_runtime PkgConfig::CMOCKA OpenSSL::SSL Threads::Threads)
target_link_options(adapter_test_s3_wire PRIVATE -Wl,--wrap=realloc)
add_test(NAME adapter.s3_wire COMMAND adapter_test_s3_wire)
set_tests_properties(adapter.s3_wire PROPERTIES LABELS adapters TIMEOUT 60)

# The store conformance suite on the live s3rver (FIXTURES_REQUIRED s3, tests/cmake/live.cmake),
# with s3rver's known differences named and counted, and a wrong secret's SignatureDoesNotMatch.
if(TARGET capstore_conformance)
  add_executable(adapter_test_s3_live ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_s3_live.c)
  target_link_libraries(adapter_test_s3_live PRIVATE capstore_conformance capstore_runtime PkgConfig::CMOCKA)
  add_test(NAME live.s3_conformance COMMAND adapter_test_s3_live ${CMAKE_BINARY_DIR}/live/s3/endpoint)
  set_tests_properties(live.s3_conformance PROPERTIES FIXTURES_REQUIRED s3 LABELS "live;adapters" TIMEOUT 180)
  # The cases s3rver is known to fail leave a cmocka assertion by longjmp and so
  # leak that case's buffers by design; leak checks stay on for adapter.s3.
  if(CAPSTORE_SANITIZE)
    set_tests_properties(live.s3_conformance PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()

# The S3 adapter on the live s3rver through the TCP fault switch: every fault's
# outcome kind within the configured timeout, and parallel requests (a held one
# blocks none of the others; the bound; close abandons what is in flight).
add_executable(adapter_test_s3_faults ${CMAKE_CURRENT_SOURCE_DIR}/adapter_test_s3_faults.c)
target_link_libraries(adapter_test_s3_faults PRIVATE capstore_runtime PkgConfig::CMOCKA)
target_include_directories(adapter_test_s3_faults PRIVATE ${CMAKE_SOURCE_DIR}/faults)
add_test(NAME live.s3_faults COMMAND adapter_test_s3_faults ${CMAKE_BINARY_DIR}/live/s3/endpoint)
set_tests_properties(live.s3_faults PROPERTIES FIXTURES_REQUIRED s3 LABELS "live;adapters" TIMEOUT 120)
