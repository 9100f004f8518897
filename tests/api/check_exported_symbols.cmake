# cmake -DNM=<nm> -DLIBRARY=<libspccl.so> -DINCLUDE_DIR=<include/> [-DWITH_NCCL=ON] -P this
#
# The shared library must export the spccl* C API and nothing else: no C++
# symbols (internal ones, or std:: template instances that escape
# -fvisibility=hidden), no bundled third-party code. And every SPCCL_API
# function the public headers declare must be there.
cmake_minimum_required(VERSION 3.19)

foreach(var NM LIBRARY INCLUDE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed (${rc}): ${err}")
endif()

# Symbols the linker defines in every shared object.
set(linker_symbols _init _fini _edata _end __bss_start __bss_start__ __bss_end__ _bss_end__
                   __end__ __data_start _DYNAMIC _GLOBAL_OFFSET_TABLE_ __dso_handle)

string(REPLACE "\n" ";" lines "${out}")
set(exported "")
set(bad "")
foreach(line IN LISTS lines)
  # "<address> <type> <name>[@[@]<version>]"
  if(NOT line MATCHES "^[0-9a-fA-F]* *([A-Za-z]) ([^ @]+)")
    continue()
  endif()
  set(type ${CMAKE_MATCH_1})
  set(name ${CMAKE_MATCH_2})
  if(name IN_LIST linker_symbols)
    continue()
  endif()
  # Version-script nodes show up as absolute symbols named after the node.
  if(type STREQUAL "A" AND NOT name MATCHES "^spccl")
    continue()
  endif()
  if(name MATCHES "^spccl")
    list(APPEND exported ${name})
  else()
    list(APPEND bad "${type} ${name}")
  endif()
endforeach()

# Every SPCCL_API function of the public headers must be defined.
file(GLOB headers ${INCLUDE_DIR}/*.h)
set(missing "")
set(declared 0)
foreach(header IN LISTS headers)
  get_filename_component(base ${header} NAME)
  if(base STREQUAL "spccl_nccl.h" AND NOT WITH_NCCL)
    continue()
  endif()
  file(READ ${header} text)
  # Join declarations that span lines, then find "SPCCL_API <type> <name>(".
  string(REGEX REPLACE "[\r\n\t ]+" " " text "${text}")
  string(REGEX MATCHALL "SPCCL_API [^;(]*[ *](spccl[A-Za-z0-9_]*) ?\\(" decls "${text}")
  foreach(decl IN LISTS decls)
    string(REGEX MATCH "(spccl[A-Za-z0-9_]*) ?\\($" _ "${decl}")
    math(EXPR declared "${declared} + 1")
    if(NOT CMAKE_MATCH_1 IN_LIST exported)
      list(APPEND missing "${CMAKE_MATCH_1} (${base})")
    endif()
  endforeach()
endforeach()

list(LENGTH exported n_exported)
message(STATUS "${LIBRARY}: ${n_exported} spccl* symbols exported, "
               "${declared} SPCCL_API functions declared in ${INCLUDE_DIR}")
set(failed FALSE)
if(bad)
  list(LENGTH bad n_bad)
  list(JOIN bad "\n  " bad_text)
  message(SEND_ERROR "${n_bad} exported symbol(s) outside the spccl* API "
                     "(hide them: visibility, or a version script):\n  ${bad_text}")
  set(failed TRUE)
endif()
if(missing)
  list(JOIN missing "\n  " missing_text)
  message(SEND_ERROR "declared in the public headers but not exported:\n  ${missing_text}")
  set(failed TRUE)
endif()
if(declared EQUAL 0)
  message(SEND_ERROR "found no SPCCL_API declarations in ${INCLUDE_DIR}: the header parser is broken")
  set(failed TRUE)
endif()
if(failed)
  message(FATAL_ERROR "exported symbols check failed")
endif()
