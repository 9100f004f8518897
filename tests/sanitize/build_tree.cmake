# ctest sanitize_build: configures (once) and builds the SPCCL_SANITIZE=address
# tree of the same sources, with the same compilers, host code only, without
# perf/ and the examples (not run there). -O1 -g1: AddressSanitizer's usual
# level, and line tables for symbolized reports (and the file and function
# names ubsan.supp matches); it compiles the test suites in less than half
# the time of -O2 -g.
#   cmake -DSOURCE_DIR= -DBINARY_DIR= -DGENERATOR= -DC_COMPILER= -DCXX_COMPILER= -P build_tree.cmake
if(NOT EXISTS ${BINARY_DIR}/CMakeCache.txt)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -G ${GENERATOR}
            -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
            -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1"
            "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSPCCL_SANITIZE=address
            -DSPCCL_WITH_CUDA=OFF -DSPCCL_BUILD_PERF=OFF -DSPCCL_BUILD_EXAMPLES=OFF
            -DSPCCL_UNIT_SANITIZERS=OFF
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE ${BINARY_DIR}/CMakeCache.txt)  # configure again next time
    message(FATAL_ERROR "configuring the sanitizer tree failed (${rc})")
  endif()
endif()
cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} -j ${jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the sanitizer tree failed (${rc})")
endif()
