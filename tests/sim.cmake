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

# Each reader invariant can fail: the readers' defects (--reader-defect N) are caught by invariant N.
add_test(NAME sim.reader_defects
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_reader_defects.sh $<TARGET_FILE:capstore-sim> 300)
set_tests_properties(sim.reader_defects PROPERTIES LABELS sim TIMEOUT 600)

# A catalog of replicas: quorum runs pass, asynchronous replication (--replica-defect 1) is caught.
add_test(NAME sim.replica_defects
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_replica_defects.sh $<TARGET_FILE:capstore-sim> 300)
set_tests_properties(sim.replica_defects PROPERTIES LABELS sim TIMEOUT 600)

add_test(NAME sim.plan_refused
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_bad_plan.sh $<TARGET_FILE:capstore-sim>)
set_tests_properties(sim.plan_refused PROPERTIES LABELS sim)

add_test(NAME purity.cores
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/purity.sh $<TARGET_FILE:capstore_core> ${CMAKE_SOURCE_DIR}/src/core)
set_tests_properties(purity.cores PROPERTIES LABELS sim)

# Seeds that once failed (faults/seeds.txt), each replayed.
add_test(NAME sim.seeds_regression
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/sim_regression_seeds.sh $<TARGET_FILE:capstore-sim>
                 ${CMAKE_SOURCE_DIR}/faults/seeds.txt)
set_tests_properties(sim.seeds_regression PROPERTIES LABELS sim TIMEOUT 600)

if(CAPSTORE_MUTANTS AND CAPSTORE_MUTANT STREQUAL "0")
  add_test(NAME sim.mutants
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/mutants.sh $<TARGET_FILE_DIR:capstore-sim>
                   ${CMAKE_SOURCE_DIR}/faults/plans 2000 ${CAPSTORE_MUTANT_LIST})
  set_tests_properties(sim.mutants PROPERTIES LABELS sim TIMEOUT 1800)
endif()

# A bounded mutation sample (issue 13, tools/mutate.py): CAPSTORE_MUTATE_SAMPLE random
# mutants of the core files a change touched (of all of src/core when none), seeded by
# the commit. It fails when the tool or the unmutated cores fail, and when the sample's
# score is under CAPSTORE_MUTATE_FAIL_UNDER percent: 0 until the survivors of the full
# run are reviewed (docs/simulator.md), so for now no surviving mutant fails it.
set(CAPSTORE_MUTATE_SAMPLE 40 CACHE STRING "Mutants sampled by sim.mutate_sample (0: no such test)")
set(CAPSTORE_MUTATE_FAIL_UNDER 0 CACHE STRING "Mutation score (percent) under which sim.mutate_sample fails")
find_program(CAPSTORE_PYTHON3 python3)
if(CAPSTORE_MUTATE_SAMPLE GREATER 0 AND CAPSTORE_PYTHON3 AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  add_test(NAME sim.mutate_sample
           COMMAND sh ${CMAKE_SOURCE_DIR}/tools/mutate_ci.sh ${CAPSTORE_MUTATE_SAMPLE}
                   ${CAPSTORE_MUTATE_FAIL_UNDER} ${CMAKE_BINARY_DIR}/mutation-sample)
  set_tests_properties(sim.mutate_sample PROPERTIES LABELS sim TIMEOUT 3600 PROCESSORS 2)
endif()

# The mutation tool's own bookkeeping: equivalents that follow their line, verdicts.
if(CAPSTORE_PYTHON3)
  add_test(NAME sim.mutate_tool COMMAND ${CAPSTORE_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/mutate_tool_test.py)
  set_tests_properties(sim.mutate_tool PROPERTIES LABELS sim TIMEOUT 60)
endif()
