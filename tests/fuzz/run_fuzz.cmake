# ctest fuzz_<target>: runs one libFuzzer target over its committed seed
# corpus, then on new inputs for at most RUNS runs or SECONDS seconds. New
# interesting inputs go to WORK_DIR/new (the committed corpus is only read);
# a crash leaves WORK_DIR/crash-<sha1>, which this test names in its output.
#   cmake -DFUZZER= -DCORPUS= -DWORK_DIR= -DRUNS= -DSECONDS= -P run_fuzz.cmake
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/new)
# A fixed seed: the same inputs on every run of the same binary.
execute_process(
  COMMAND ${FUZZER} -seed=1 -runs=${RUNS} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -print_final_stats=1 -artifact_prefix=${WORK_DIR}/ ${WORK_DIR}/new ${CORPUS}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK_DIR}/crash-* ${WORK_DIR}/leak-* ${WORK_DIR}/timeout-* ${WORK_DIR}/oom-*)
  message(FATAL_ERROR "${FUZZER} found a failing input (exit ${rc}): ${found}\n"
                      "reproduce with: ${FUZZER} <that file>")
endif()
