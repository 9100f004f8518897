# Fails, listing them, when C, C++ or CUDA sources differ from .clang-format.
#
#   cmake -DSOURCE_DIR=<repository root> [-DCLANG_FORMAT=clang-format-14] -P cmake/check_format.cmake
#
# Checks every .c, .cc, .cpp, .h, .cu and .cuh file under SOURCE_DIR except build
# trees (build*/, python/build/) and the fuzz corpus. The version matters:
# another clang-format may format the same file differently, so the check
# uses the one named (Debian 12's clang-format is 14). To fix a file:
#   clang-format -i FILE
if(NOT SOURCE_DIR)
  get_filename_component(SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()
if(NOT CLANG_FORMAT)
  find_program(CLANG_FORMAT NAMES clang-format-14 clang-format)
endif()
if(NOT CLANG_FORMAT)
  message(FATAL_ERROR "check_format: clang-format not found (apt-get install clang-format)")
endif()
if(NOT EXISTS "${SOURCE_DIR}/.clang-format")
  message(FATAL_ERROR "check_format: ${SOURCE_DIR}/.clang-format is missing")
endif()

file(GLOB_RECURSE candidates RELATIVE "${SOURCE_DIR}"
     "${SOURCE_DIR}/*.c" "${SOURCE_DIR}/*.cc" "${SOURCE_DIR}/*.cpp" "${SOURCE_DIR}/*.h" "${SOURCE_DIR}/*.cu" "${SOURCE_DIR}/*.cuh")
set(files)
foreach(f IN LISTS candidates)
  if(f MATCHES "^(build[^/]*|_build[^/]*|python/build|\\.git|tests/fuzz/corpus)/")
    continue()
  endif()
  list(APPEND files "${f}")
endforeach()
list(SORT files)

set(unformatted)
set(lines 0)
foreach(f IN LISTS files)
  execute_process(COMMAND "${CLANG_FORMAT}" --style=file --dry-run "${f}"
                  WORKING_DIRECTORY "${SOURCE_DIR}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE diagnostics)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_format: ${CLANG_FORMAT} failed on ${f}: ${diagnostics}")
  endif()
  if(diagnostics MATCHES "warning:")
    # One "code should be clang-formatted" warning per place that differs.
    string(REGEX MATCHALL "warning: code should be clang-formatted" places "${diagnostics}")
    list(LENGTH places n)
    math(EXPR lines "${lines} + ${n}")
    list(APPEND unformatted "${f} (${n})")
  endif()
endforeach()

list(LENGTH files n_files)
list(LENGTH unformatted n_bad)
if(n_bad GREATER 0)
  list(JOIN unformatted "\n  " text)
  message(FATAL_ERROR "check_format: ${n_bad} of ${n_files} files differ from .clang-format "
                      "(${lines} places; fix with clang-format -i):\n  ${text}")
endif()
message(STATUS "check_format: ${n_files} files formatted as .clang-format says")
