# The library as a dependency (issue 14): one library a user links, as
# libcapstore.so and libcapstore.a, made of the objects the tests link
# (capstore_core_objects, capstore_pack_objects, capstore_runtime_objects in
# CMakeLists.txt; not the simulator, not faults/), with its headers, capstore.pc
# and the CMake package capstore (capstore::capstore, capstore::capstore_static).
# tests/install_consumer.sh builds examples/ against what this installs.
include(CMakePackageConfigHelpers)

set(CAPSTORE_OBJECTS $<TARGET_OBJECTS:capstore_core_objects> $<TARGET_OBJECTS:capstore_pack_objects>
    $<TARGET_OBJECTS:capstore_runtime_objects>)
add_library(capstore_shared SHARED ${CAPSTORE_OBJECTS})
add_library(capstore_static STATIC ${CAPSTORE_OBJECTS})
foreach(target capstore_shared capstore_static)
  target_link_libraries(${target} PRIVATE ${CAPSTORE_PACK_LIBRARIES} ${CAPSTORE_RUNTIME_LIBRARIES})
  target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
# Before 1.0 a minor release may change the ABI, so the SONAME carries MAJOR.MINOR until then.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(CAPSTORE_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(CAPSTORE_COMPATIBILITY SameMinorVersion)
else()
  set(CAPSTORE_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(CAPSTORE_COMPATIBILITY SameMajorVersion)
endif()
# Both are named capstore; they are made in lib/, because the build tree's
# libcapstore.a is the tests' archive (target capstore, with faults/).
set_target_properties(capstore_shared capstore_static PROPERTIES OUTPUT_NAME capstore
                      ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
set_target_properties(capstore_shared PROPERTIES EXPORT_NAME capstore VERSION ${PROJECT_VERSION}
                      SOVERSION ${CAPSTORE_SOVERSION} INSTALL_RPATH_USE_LINK_PATH ON)
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  # Only the public API (capstore_*, cs_*) is exported; every other symbol stays inside.
  set(CAPSTORE_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/capstore.map)
  target_link_options(capstore_shared PRIVATE "LINKER:--version-script=${CAPSTORE_VERSION_SCRIPT}")
  set_property(TARGET capstore_shared APPEND PROPERTY LINK_DEPENDS ${CAPSTORE_VERSION_SCRIPT})
  # Every library the code calls is a DT_NEEDED entry (sanitizer runtimes are the program's, not the library's).
  if(NOT CAPSTORE_SANITIZE AND NOT CAPSTORE_FUZZ)
    target_link_options(capstore_shared PRIVATE "LINKER:--no-undefined")
  endif()
endif()

set(CAPSTORE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/capstore)
install(TARGETS capstore_shared capstore_static EXPORT capstoreTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/capstore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT capstoreTargets NAMESPACE capstore:: DESTINATION ${CAPSTORE_CMAKE_DIR})

# capstoreConfig.cmake finds libcapstore.a's system libraries as CMakeLists.txt did.
set(CAPSTORE_CONFIG_PKG_MODULES "CURL libcurl" "SQLITE3 sqlite3" "EXPAT expat" "JANSSON jansson" "BLOSC blosc")
set(CAPSTORE_CONFIG_CUDA "")
# capstore.pc: libcurl as -lcurl (capstore.pc.in says why), pthread, and the CUDA runtime when it was used.
set(CAPSTORE_PC_LIBS ${CURL_LIBRARY_DIRS})
list(REMOVE_ITEM CAPSTORE_PC_LIBS ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
list(TRANSFORM CAPSTORE_PC_LIBS PREPEND "-L")
list(APPEND CAPSTORE_PC_LIBS -lcurl -pthread)
set(CAPSTORE_PC_REQUIRES "")
if(ISAL_FOUND)
  list(APPEND CAPSTORE_CONFIG_PKG_MODULES "ISAL libisal")
  string(APPEND CAPSTORE_PC_REQUIRES " libisal")
endif()
if(CUDAToolkit_FOUND)
  set(CAPSTORE_CONFIG_CUDA "find_dependency(CUDAToolkit)")
  list(APPEND CAPSTORE_PC_LIBS -L${CUDAToolkit_LIBRARY_DIR} -lcudart)
endif()
list(JOIN CAPSTORE_PC_LIBS " " CAPSTORE_PC_LIBS)
list(JOIN CAPSTORE_CONFIG_PKG_MODULES "\" \"" CAPSTORE_CONFIG_PKG_MODULES)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/capstoreConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/capstoreConfig.cmake INSTALL_DESTINATION ${CAPSTORE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/capstoreConfigVersion.cmake
                                 COMPATIBILITY ${CAPSTORE_COMPATIBILITY})
install(FILES ${CMAKE_BINARY_DIR}/capstoreConfig.cmake ${CMAKE_BINARY_DIR}/capstoreConfigVersion.cmake
        DESTINATION ${CAPSTORE_CMAKE_DIR})

# The .pc file finds its prefix from where it lies (${pcfiledir}), so `cmake --install --prefix` may move it.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "capstore.pc wants CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR relative to the prefix")
endif()
file(RELATIVE_PATH CAPSTORE_PC_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" CAPSTORE_PC_PREFIX "${CAPSTORE_PC_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/capstore.pc.in ${CMAKE_BINARY_DIR}/capstore.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/capstore.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
