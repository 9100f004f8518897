# Variables for cmake/spccl.pc.in (included by the root CMakeLists.txt before
# it configures spccl.pc).
#
# MPI: spccl.pc Requires the pkg-config module of the MPI that FindMPI found
# (ompi-c for Open MPI, mpich for MPICH), so `pkg-config --cflags --libs spccl`
# brings mpi.h's include path and libmpi. Set SPCCL_PKGCONFIG_MPI to choose
# the module; where there is none, the flags FindMPI found are written out.

# prefix, relative to <libdir>/pkgconfig where spccl.pc is installed.
file(RELATIVE_PATH SPCCL_PC_PREFIX_FROM_PCDIR
  "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" SPCCL_PC_PREFIX_FROM_PCDIR "${SPCCL_PC_PREFIX_FROM_PCDIR}")
foreach(_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}}")
    set(SPCCL_PC_${_dir} "${CMAKE_INSTALL_${_dir}}")
  else()
    set(SPCCL_PC_${_dir} "\${prefix}/${CMAKE_INSTALL_${_dir}}")
  endif()
endforeach()

if(NOT DEFINED SPCCL_PKGCONFIG_MPI)
  set(_spccl_pc_mpi "")
  find_program(_spccl_pkg_config NAMES pkg-config pkgconf)
  mark_as_advanced(_spccl_pkg_config)
  if(_spccl_pkg_config)
    # The module of the implementation FindMPI chose (mpicc's, through
    # Debian's alternatives), else the first one present.
    set(_candidates ompi-c mpich)
    if("${MPI_C_LIBRARIES}${MPI_C_INCLUDE_DIRS}" MATCHES "mpich")
      set(_candidates mpich ompi-c)
    endif()
    foreach(_module IN LISTS _candidates)
      execute_process(COMMAND ${_spccl_pkg_config} --exists ${_module} RESULT_VARIABLE _rc)
      if(_rc EQUAL 0)
        set(_spccl_pc_mpi ${_module})
        break()
      endif()
    endforeach()
  endif()
  set(SPCCL_PKGCONFIG_MPI "${_spccl_pc_mpi}" CACHE STRING
      "pkg-config module of MPI that spccl.pc Requires (empty: write FindMPI's flags instead)")
endif()

set(SPCCL_PC_REQUIRES "${SPCCL_PKGCONFIG_MPI}")
set(SPCCL_PC_MPI_CFLAGS "")
set(SPCCL_PC_MPI_LIBS "")
if(NOT SPCCL_PKGCONFIG_MPI)
  foreach(_inc IN LISTS MPI_C_INCLUDE_DIRS)
    string(APPEND SPCCL_PC_MPI_CFLAGS " -I${_inc}")
  endforeach()
  foreach(_lib IN LISTS MPI_C_LIBRARIES)
    string(APPEND SPCCL_PC_MPI_LIBS " ${_lib}")
  endforeach()
  string(STRIP "${SPCCL_PC_MPI_CFLAGS}" SPCCL_PC_MPI_CFLAGS)
  string(STRIP "${SPCCL_PC_MPI_LIBS}" SPCCL_PC_MPI_LIBS)
endif()
