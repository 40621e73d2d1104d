# Simulation tests: swarm seeds, every fault plan, determinism, mutants, purity.
set(SIM_BIN $<TARGET_FILE:capstore-sim>)
set(CAPSTORE_SIM_SEEDS 2000 CACHE STRING "Swarm seeds run by ctest")

add_test(NAME sim.seeds COMMAND capstore-sim --seeds ${CAPSTORE_SIM_SEEDS} --quiet)
set_tests_properties(sim.seeds PROPERTIES LABELS sim TIMEOUT 1200)

# A window of seeds derived from the commit (printed, so a failure replays).
add_test(NAME sim.seeds_commit
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_commit_seeds.sh $<TARGET_FILE:capstore-sim> ${CMAKE_SOURCE_DIR}
                 ${CAPSTORE_SIM_SEEDS})
set_tests_properties(sim.seeds_commit PROPERTIES LABELS sim TIMEOUT 1200)

file(GLOB SIM_PLANS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/faults/plans/*.plan)
foreach(plan ${SIM_PLANS})
  get_filename_component(name ${plan} NAME_WE)
  add_test(NAME sim.plan.${name} COMMAND capstore-sim --plan ${plan})
  set_tests_properties(sim.plan.${name} PROPERTIES LABELS sim TIMEOUT 120)
endforeach()

# Every required coverage mark (sim/coverage.h) is reached by the same seeds; counting changes no run.
add_test(NAME sim.coverage
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_coverage.sh $<TARGET_FILE:capstore-sim> ${CAPSTORE_SIM_SEEDS}
                 ${CMAKE_SOURCE_DIR}/faults/plans)
set_tests_properties(sim.coverage PROPERTIES LABELS sim TIMEOUT 1200)

add_test(NAME sim.determinism
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_determinism.sh $<TARGET_FILE:capstore-sim> 100)
set_tests_properties(sim.determinism PROPERTIES LABELS sim TIMEOUT 600)

add_test(NAME sim.plan_refused
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_bad_plan.sh $<TARGET_FILE:capstore-sim>)
set_tests_properties(sim.plan_refused PROPERTIES LABELS sim)

add_test(NAME purity.cores
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/purity.sh $<TARGET_FILE:capstore_core> ${CMAKE_SOURCE_DIR}/src/core)
set_tests_properties(purity.cores PROPERTIES LABELS sim)

if(CAPSTORE_MUTANTS AND CAPSTORE_MUTANT STREQUAL "0")
  add_test(NAME sim.mutants
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mutants.sh $<TARGET_FILE_DIR:capstore-sim>
                   ${CMAKE_SOURCE_DIR}/faults/plans 2000 ${CAPSTORE_MUTANT_LIST})
  set_tests_properties(sim.mutants PROPERTIES LABELS sim TIMEOUT 1800)
endif()
