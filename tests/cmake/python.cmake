# The Python package (issue 16, python/): pytest over the build tree's
# libcapstore.so, on the embedded defaults and (live.python) on S3 + ClickHouse;
# the example transformer; and pip install ./python into a fresh virtual
# environment, then the example from there. Debian's interpreter: python3-torch,
# python3-numpy and python3-pytest are Debian packages (dev.sh installs them).
if(CAPSTORE_FUZZ)
  return()
endif()
if(EXISTS /usr/bin/python3)
  set(CAPSTORE_PYTHON /usr/bin/python3 CACHE FILEPATH "the Python with Debian's torch, numpy and pytest")
else()
  find_program(CAPSTORE_PYTHON python3 REQUIRED)
endif()
set(CAPSTORE_PY_ENV PYTHONPATH=${CMAKE_SOURCE_DIR}/python CAPSTORE_LIBRARY=$<TARGET_FILE:capstore_shared>
    PYTHONDONTWRITEBYTECODE=1)
set(CAPSTORE_PYTEST ${CAPSTORE_PYTHON} -m pytest -q -p no:cacheprovider -p no:hypothesispytest -rs ${CMAKE_SOURCE_DIR}/python/tests
    --basetemp=${CMAKE_CURRENT_BINARY_DIR})

if(CAPSTORE_SANITIZE)
  # The whole suite against the AddressSanitizer build of the library: the interpreter is not instrumented,
  # so the sanitizer's runtime is preloaded; the tests marked asan also run their scripts under it.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE CAPSTORE_LIBASAN
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  add_test(NAME python.asan COMMAND ${CAPSTORE_PYTEST}/pytest-asan)
  set_tests_properties(python.asan PROPERTIES LABELS "python;runtime" TIMEOUT 1200 ENVIRONMENT
    "${CAPSTORE_PY_ENV};CAPSTORE_PY_BACKENDS=embedded;CAPSTORE_ASAN_LIBRARY=$<TARGET_FILE:capstore_shared>;LD_PRELOAD=${CAPSTORE_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
  return()
endif()

add_test(NAME python.pytest COMMAND ${CAPSTORE_PYTEST}/pytest-embedded -m "not asan")
set_tests_properties(python.pytest PROPERTIES LABELS "python;runtime" TIMEOUT 900
                     ENVIRONMENT "${CAPSTORE_PY_ENV};CAPSTORE_PY_BACKENDS=embedded")

add_test(NAME live.python COMMAND ${CAPSTORE_PYTEST}/pytest-servers -k servers -m "not asan")
set_tests_properties(live.python PROPERTIES FIXTURES_REQUIRED "clickhouse;s3" LABELS "live;python" RESOURCE_LOCK clickhouse
                     TIMEOUT 900 ENVIRONMENT "${CAPSTORE_PY_ENV};CAPSTORE_PY_BACKENDS=servers;CAPSTORE_LIVE_CLICKHOUSE=${CMAKE_BINARY_DIR}/live/clickhouse/endpoint;CAPSTORE_LIVE_S3=${CMAKE_BINARY_DIR}/live/s3/endpoint")

add_test(NAME python.example
         COMMAND ${CAPSTORE_PYTHON} ${CMAKE_SOURCE_DIR}/examples/python_transformer.py
                 --dir ${CMAKE_CURRENT_BINARY_DIR}/python_example --requests 12 --batch 4)
set_tests_properties(python.example PROPERTIES LABELS "python;runtime" TIMEOUT 300 ENVIRONMENT "${CAPSTORE_PY_ENV}"
                     PASS_REGULAR_EXPRESSION "read back 48 of 48 records equal")

add_test(NAME python.pip_install
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python_pip.sh ${CAPSTORE_PYTHON} ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:capstore_shared> ${CMAKE_CURRENT_BINARY_DIR}/python_pip)
set_tests_properties(python.pip_install PROPERTIES LABELS "python;install" TIMEOUT 600)

# CUDA tensors from Python (tests/gpu/test_python_cuda.py): exits 77 without a device (skipped, not passed).
add_test(NAME python.cuda COMMAND ${CAPSTORE_PYTHON} ${CMAKE_SOURCE_DIR}/tests/gpu/test_python_cuda.py)
set_tests_properties(python.cuda PROPERTIES LABELS "python;gpu" TIMEOUT 300 SKIP_RETURN_CODE 77
                     ENVIRONMENT "${CAPSTORE_PY_ENV}")
