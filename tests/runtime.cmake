# The spool and the capture runtime (src/adapters, src/runtime): their unit
# tests link capstore_runtime instead of the simulator.
file(GLOB RUNTIME_UNIT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_spool*.c
     ${CMAKE_CURRENT_SOURCE_DIR}/test_capture*.c)
foreach(src ${RUNTIME_UNIT_TESTS})
  get_filename_component(name ${src} NAME_WE)
  set_property(TARGET ${name} PROPERTY LINK_LIBRARIES capstore_runtime PkgConfig::CMOCKA)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src/runtime)
  set_tests_properties(unit.${name} PROPERTIES LABELS "unit;runtime" TIMEOUT 300)
endforeach()
