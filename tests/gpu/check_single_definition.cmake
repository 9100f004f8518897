# Proves that the per-element rules have exactly one definition, in
# kernels/core/elementwise.h, shared by both back ends:
#   1. every function and constant that header defines is defined nowhere
#      else in the library's sources (no second copy of a rule, no lambda or
#      macro of the same name);
#   2. the host kernels and every CUDA source include the core header;
#   3. every core:: rule the host kernels call, the CUDA kernels call too
#      (so the device decisions come from the same functions).
# No GPU needed. Run: cmake -DSOURCE_DIR=<repo root> -P check_single_definition.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "pass -DSOURCE_DIR=<repository root>")
endif()

set(core_header "${SOURCE_DIR}/kernels/core/elementwise.h")
file(READ "${core_header}" core_text)

# Functions: `SPCCL_HOST_DEVICE <return type> name(`; constants: `constexpr <type> kName =`.
string(REGEX MATCHALL "SPCCL_HOST_DEVICE[ \t]+[A-Za-z0-9_:<>]+[ \t\\*&]+[A-Za-z_][A-Za-z0-9_]*[ \t]*\\("
       fn_decls "${core_text}")
set(rules "")
foreach(d IN LISTS fn_decls)
  string(REGEX REPLACE ".*[ \t\\*&]([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\($" "\\1" name "${d}")
  list(APPEND rules "${name}")
endforeach()
string(REGEX MATCHALL "constexpr[ \t]+[A-Za-z0-9_:]+[ \t]+k[A-Za-z0-9_]+[ \t]*=" const_decls "${core_text}")
set(constants "")
foreach(d IN LISTS const_decls)
  string(REGEX REPLACE ".*[ \t](k[A-Za-z0-9_]+)[ \t]*=$" "\\1" name "${d}")
  list(APPEND constants "${name}")
endforeach()
list(REMOVE_DUPLICATES rules)
list(LENGTH rules rule_count)
if(rule_count LESS 15)
  message(FATAL_ERROR "found only ${rule_count} rules in ${core_header} (${rules}): the pattern is stale")
endif()
foreach(must IN ITEMS classify magnitudeKey isNonFiniteKey floatToHalfBits halfBitsToFloat floatToBfloat16Bits
                      bfloat16BitsToFloat wireHalfBits wireBfloat16Bits roundToWire storeWireValue loadWireValue
                      rowKeep rowRank)
  if(NOT must IN_LIST rules)
    message(FATAL_ERROR "rule ${must} not found in ${core_header}")
  endif()
endforeach()
message(STATUS "core rules (${rule_count}): ${rules}")
message(STATUS "core constants: ${constants}")

file(GLOB_RECURSE sources
  "${SOURCE_DIR}/kernels/host/*.h" "${SOURCE_DIR}/kernels/host/*.cc"
  "${SOURCE_DIR}/kernels/cuda/*.h" "${SOURCE_DIR}/kernels/cuda/*.cuh" "${SOURCE_DIR}/kernels/cuda/*.cu"
  "${SOURCE_DIR}/src/*.h" "${SOURCE_DIR}/src/*.cc" "${SOURCE_DIR}/src/*.cu"
  "${SOURCE_DIR}/codec/*.h" "${SOURCE_DIR}/codec/*.cc" "${SOURCE_DIR}/transport/*.h" "${SOURCE_DIR}/transport/*.cc"
  "${SOURCE_DIR}/collectives/*.h" "${SOURCE_DIR}/collectives/*.cc" "${SOURCE_DIR}/collectives/*.cu")
list(FILTER sources EXCLUDE REGEX "/kernels/core/")

set(failures "")
foreach(f IN LISTS sources)
  file(READ "${f}" text)
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")  # comments may quote a rule
  file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
  foreach(name IN LISTS rules)
    # A definition: a type token, the name, a parameter list, then a body.
    if(text MATCHES "[A-Za-z0-9_>&\\*][ \t\n]+${name}[ \t\n]*\\([^;{}]*\\)[ \t\n]*(const[ \t\n]*)?(noexcept[ \t\n]*)?\\{")
      list(APPEND failures "${rel}: defines ${name}(...)")
    endif()
    if(text MATCHES "[^A-Za-z0-9_:.>]${name}[ \t\n]*=[ \t\n]*\\[")
      list(APPEND failures "${rel}: defines a lambda named ${name}")
    endif()
    if(text MATCHES "#[ \t]*define[ \t]+${name}[^A-Za-z0-9_]")
      list(APPEND failures "${rel}: defines a macro named ${name}")
    endif()
  endforeach()
  foreach(name IN LISTS constants)
    if(text MATCHES "[^A-Za-z0-9_:]${name}[ \t\n]*=[^=]")
      list(APPEND failures "${rel}: defines ${name} again")
    endif()
  endforeach()
endforeach()

# Both back ends include the core header.
set(include_line "#include \"kernels/core/elementwise.h\"")
file(READ "${SOURCE_DIR}/kernels/host/host_kernels.h" host_header)
string(FIND "${host_header}" "${include_line}" at)
if(at EQUAL -1)
  list(APPEND failures "kernels/host/host_kernels.h does not include kernels/core/elementwise.h")
endif()
file(GLOB cuda_sources "${SOURCE_DIR}/kernels/cuda/*.cu")
list(LENGTH cuda_sources cuda_count)
if(cuda_count EQUAL 0)
  list(APPEND failures "no kernels/cuda/*.cu sources")
endif()
set(cuda_text "")
foreach(f IN LISTS cuda_sources)
  file(READ "${f}" text)
  string(FIND "${text}" "${include_line}" at)
  if(at EQUAL -1)
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${f}")
    list(APPEND failures "${rel} does not include kernels/core/elementwise.h")
  endif()
  string(APPEND cuda_text "${text}")
endforeach()
file(GLOB cuda_headers "${SOURCE_DIR}/kernels/cuda/*.cuh")
foreach(f IN LISTS cuda_headers)
  file(READ "${f}" text)
  string(APPEND cuda_text "${text}")
endforeach()

# The rules the host kernels call, the CUDA kernels call as well. Exempt:
# rowRankPosition (the host decodes positions out of its rank scratch; the
# device writes positions directly) and wireValueBytes (a size, no decision).
set(exempt rowRankPosition wireValueBytes)
file(GLOB host_sources "${SOURCE_DIR}/kernels/host/*.cc" "${SOURCE_DIR}/kernels/host/*.h")
set(host_text "")
foreach(f IN LISTS host_sources)
  file(READ "${f}" text)
  string(APPEND host_text "${text}")
endforeach()
set(host_used "")
foreach(name IN LISTS rules)
  if(name IN_LIST exempt)
    continue()
  endif()
  if(host_text MATCHES "core::${name}[ \t]*\\(")
    list(APPEND host_used "${name}")
    if(NOT cuda_text MATCHES "core::${name}[ \t]*\\(")
      list(APPEND failures "kernels/host calls core::${name} but no kernels/cuda source does")
    endif()
  endif()
endforeach()
list(LENGTH host_used host_used_count)
if(host_used_count LESS 8)
  list(APPEND failures "kernels/host calls only ${host_used_count} core rules (${host_used})")
endif()
message(STATUS "rules used by both back ends: ${host_used}")

if(failures)
  list(JOIN failures "\n  " msg)
  message(FATAL_ERROR "single definition of the core rules violated:\n  ${msg}")
endif()
list(LENGTH sources source_count)
message(STATUS "OK: ${rule_count} core rules defined once, in kernels/core (${source_count} library sources scanned)")
