# ctest fuzz_build: configures (once) and builds the fuzz project (project/)
# with clang++. cmake -DSOURCE_DIR= -DBINARY_DIR= -DCXX= -DCC= -DGENERATOR= -P build_fuzz.cmake
if(NOT EXISTS ${BINARY_DIR}/CMakeCache.txt)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -G ${GENERATOR}
            -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=RelWithDebInfo
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE ${BINARY_DIR}/CMakeCache.txt)  # configure again next time
    message(FATAL_ERROR "configuring the fuzz project failed (${rc})")
  endif()
endif()
cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} -j ${jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz project failed (${rc})")
endif()
