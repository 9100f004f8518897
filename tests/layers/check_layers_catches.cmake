# The layer check fails where it should: a fixture tree (made here, under
# WORK_DIR) with one include of each forbidden kind must fail with each one
# named, and the same tree without them must pass.
# Usage: cmake -DCHECK=<check_layers.cmake> -DWORK_DIR=<scratch folder> -P check_layers_catches.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
set(good
  "include/spccl.h=int x"
  "kernels/core/a.h=#include \"include/spccl.h\""
  "kernels/host/b.cc=#include \"kernels/core/a.h\""
  "codec/c.cc=#include \"kernels/host/b.h\""
  "transport/d.cc=#include \"codec/c.h\""
  "collectives/e.cc=#include \"transport/d.h\""
  "src/f.cc=#include \"collectives/e.h\"\n#include \"kernels/cuda/g.h\""
  "python/p.cpp=#include \"include/spccl.h\"")
set(bad
  "kernels/host/up.cc=#include \"src/comm.h\""
  "kernels/cuda/sibling.cu=#include \"kernels/host/b.h\""
  "codec/up.cc=#include \"collectives/e.h\""
  "collectives/up.cc=#include \"src/f.h\""
  "python/internal.cpp=#include \"codec/c.h\"")
foreach(entry IN LISTS good bad)
  string(REGEX MATCH "^[^=]+" path "${entry}")
  string(REGEX REPLACE "^[^=]+=" "" text "${entry}")
  string(REPLACE "\\n" "\n" text "${text}")
  file(WRITE "${WORK_DIR}/tree/${path}" "${text}\n")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${WORK_DIR}/tree -P ${CHECK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the layer check passed a tree with upward includes:\n${out}${err}")
endif()
foreach(entry IN LISTS bad)
  string(REGEX MATCH "^[^=]+" path "${entry}")
  string(FIND "${err}" "${path}:" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the layer check did not name ${path}:\n${err}")
  endif()
endforeach()
foreach(entry IN LISTS bad)
  string(REGEX MATCH "^[^=]+" path "${entry}")
  file(REMOVE "${WORK_DIR}/tree/${path}")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${WORK_DIR}/tree -P ${CHECK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the layer check failed a tree whose includes all run down the chain:\n${err}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
message(STATUS "OK: the layer check names each of the 5 upward includes and passes the tree without them")
