# The installed package (issue 14, cmake/install.cmake): tests/install_consumer.sh
# installs this build into a prefix under the build tree and builds and runs
# examples/ against it, through pkg-config and find_package(capstore).
if(CAPSTORE_SANITIZE OR CAPSTORE_FUZZ)
  # A sanitizer build's library needs the sanitizer runtime loaded first in every program that links it.
  message(STATUS "install.consumer is not registered in a sanitizer build")
  return()
endif()
add_test(NAME install.consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer.sh ${CMAKE_COMMAND} ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install_consumer)
set_tests_properties(install.consumer PROPERTIES LABELS install TIMEOUT 600 ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
