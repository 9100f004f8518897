# One step of the install test, run by ctest as `cmake -D... -P run_install_test.cmake`.
#
#   STEP=install       cmake --install BUILD_DIR into a fresh PREFIX, check the layout
#   STEP=find_package  configure, build and run consumer/ against PREFIX with
#                      find_package(spccl) (CONSUMER_LANGUAGE C, CXX or CUDA)
#   STEP=pkg_config    compile consumer/main.c with `pkg-config --cflags --libs spccl`
#                      (PKG_CONFIG_PATH = PREFIX's pkgconfig dir only) and run it
cmake_minimum_required(VERSION 3.19) # COMMAND_ERROR_IS_FATAL

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "+ ${shown}")
  execute_process(COMMAND ${ARGN} COMMAND_ERROR_IS_FATAL ANY)
endfunction()

foreach(var STEP PREFIX LIBDIR INCLUDEDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()
# --config only where there is one (multi-config generators, or a build type).
set(config_args "")
set(config_dir "")
if(CONFIG)
  set(config_args --config ${CONFIG})
  set(config_dir ${CONFIG})
endif()
get_filename_component(consumer_dir ${CMAKE_CURRENT_LIST_DIR}/consumer ABSOLUTE)
if(IS_ABSOLUTE "${LIBDIR}")
  set(libdir ${LIBDIR})
else()
  set(libdir ${PREFIX}/${LIBDIR})
endif()

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} ${config_args})
  foreach(f ${INCLUDEDIR}/spccl.h ${INCLUDEDIR}/spccl_mpi.h
            ${LIBDIR}/libspccl.so ${LIBDIR}/cmake/spccl/spcclConfig.cmake
            ${LIBDIR}/cmake/spccl/spcclConfigVersion.cmake ${LIBDIR}/cmake/spccl/spcclTargets.cmake
            ${LIBDIR}/pkgconfig/spccl.pc)
    if(IS_ABSOLUTE "${f}")
      set(path ${f})
    else()
      set(path ${PREFIX}/${f})
    endif()
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "not installed: ${path}")
    endif()
  endforeach()
  file(READ ${libdir}/pkgconfig/spccl.pc pc)
  message(STATUS "installed into ${PREFIX}; spccl.pc:\n${pc}")

elseif(STEP STREQUAL "find_package")
  set(work ${WORK_DIR}/find_package_${CONSUMER_LANGUAGE})
  file(REMOVE_RECURSE ${work})
  set(cuda_args "")
  if(CUDA_COMPILER)
    set(cuda_args -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER})
  endif()
  run(${CMAKE_COMMAND} -S ${consumer_dir} -B ${work} -G ${GENERATOR}
      -DCONSUMER_LANGUAGE=${CONSUMER_LANGUAGE}
      -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} ${cuda_args}
      -DCMAKE_BUILD_TYPE=${CONFIG}
      -DCMAKE_PREFIX_PATH=${PREFIX}
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  # The package must come from PREFIX, not from the build tree or the system.
  file(STRINGS ${work}/CMakeCache.txt found REGEX "^spccl_DIR:")
  string(REGEX REPLACE "^spccl_DIR:[A-Z]*=" "" found "${found}")
  file(REAL_PATH "${found}" found)
  file(REAL_PATH "${PREFIX}" real_prefix)
  string(FIND "${found}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "find_package(spccl) found ${found}, not the package under ${PREFIX}")
  endif()
  run(${CMAKE_COMMAND} --build ${work} ${config_args})
  if(config_dir AND EXISTS ${work}/${config_dir}/consumer)
    run(${work}/${config_dir}/consumer)
  else()
    run(${work}/consumer)
  endif()

elseif(STEP STREQUAL "pkg_config")
  set(work ${WORK_DIR}/pkg_config)
  file(REMOVE_RECURSE ${work})
  file(MAKE_DIRECTORY ${work})
  # Only PREFIX's spccl.pc may be found; MPI's .pc comes from the system dirs.
  set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --modversion spccl
    OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  if(NOT version STREQUAL EXPECTED_VERSION)
    message(FATAL_ERROR "pkg-config --modversion spccl: ${version}, expected ${EXPECTED_VERSION}")
  endif()
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs spccl
    OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  message(STATUS "pkg-config --cflags --libs spccl: ${flags}")
  # The flags must point into PREFIX (a .pc that still names the configure-time
  # prefix would build against whatever lives there, or fail).
  file(REAL_PATH "${PREFIX}" real_prefix)
  set(points_into_prefix FALSE)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  foreach(flag IN LISTS flags)
    if(flag MATCHES "^-[IL](.*)$" AND EXISTS "${CMAKE_MATCH_1}")
      file(REAL_PATH "${CMAKE_MATCH_1}" dir)
      string(FIND "${dir}/" "${real_prefix}/" at)
      if(at EQUAL 0)
        set(points_into_prefix TRUE)
      endif()
    endif()
  endforeach()
  if(NOT points_into_prefix)
    message(FATAL_ERROR "no -I/-L flag of spccl.pc points into ${PREFIX}")
  endif()
  run(${C_COMPILER} -std=c99 -Wall -o ${work}/consumer ${consumer_dir}/main.c ${flags}
      -Wl,-rpath,${libdir})
  run(${work}/consumer)

else()
  message(FATAL_ERROR "unknown STEP ${STEP}")
endif()
