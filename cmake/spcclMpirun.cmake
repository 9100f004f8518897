# mpirun and the flags every ctest that launches ranks uses: --oversubscribe
# (CI has 2 cores), --bind-to none, and --allow-run-as-root when running as
# root (CI and the development machines are root).
find_program(SPCCL_MPIEXEC NAMES mpirun mpiexec REQUIRED)
set(SPCCL_MPIRUN_FLAGS --oversubscribe --bind-to none)
execute_process(COMMAND id -u OUTPUT_VARIABLE _spccl_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_spccl_uid STREQUAL "0")
  list(APPEND SPCCL_MPIRUN_FLAGS --allow-run-as-root)
endif()
