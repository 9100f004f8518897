# SPCCL_SANITIZE=address: the whole project (library, tests, perf, examples)
# compiled and linked with AddressSanitizer + UndefinedBehaviorSanitizer, any
# finding fatal (-fno-sanitize-recover=all). Host code only: CUDA sources are
# not instrumented. The ctests labelled "sanitize" build such a tree next to
# this one and run the unit and multi-rank suites in it (tests/sanitize,
# docs/RELIABILITY.md).
#
# Two UBSan checks, enum and nonnull-attribute, are built recoverable: only a
# recoverable check can be suppressed at run time, so that is where
# tests/sanitize/ubsan.supp could list a known finding (with its reason). It
# lists none today: the findings it once held are fixed. Run with
# UBSAN_OPTIONS=halt_on_error=1 (as every ctest does) and any finding that is
# not suppressed is still fatal.
set(SPCCL_SANITIZE "" CACHE STRING "Sanitizers for the whole build: empty (none) or address (ASan + UBSan)")
set_property(CACHE SPCCL_SANITIZE PROPERTY STRINGS "" address)
if(SPCCL_SANITIZE STREQUAL "address")
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "SPCCL_SANITIZE=address needs GCC or Clang, not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  set(_spccl_san -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=all
                 -fsanitize-recover=enum -fsanitize-recover=nonnull-attribute -fno-omit-frame-pointer)
  foreach(_flag IN LISTS _spccl_san)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${_flag}>)
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:${_flag}>)
  endforeach()
  message(STATUS "SPCCL_SANITIZE=address: everything under AddressSanitizer + UBSan")
elseif(NOT SPCCL_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SPCCL_SANITIZE=${SPCCL_SANITIZE}: the supported value is 'address' (ASan + UBSan)")
endif()
