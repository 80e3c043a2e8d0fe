#!/usr/bin/env bash
# The one test command: installs build dependencies (Debian packages), builds everything,
# and runs every test (unit + integration) through CTest. Steps, in this order (docs/building.md,
# "The one command"): the main build; the main tree's CTest (the step that always runs) while the
# ASan+UBSan tree builds in the background at idle priority (only the CPU time the tests leave
# unused); the rest of that build, then its CTest while the fuzz tree builds in the background;
# the rest of that build, then 6 fuzz targets x 15 s, two at a time. The last line sums up the
# seconds each step took.
#
#   tests/run.sh                 # Release-ish build in build/, all tests
#   BUILD_DIR=build-asan TESSERA_SANITIZE="address;undefined" tests/run.sh
#   TEST_FILTER=scheduler tests/run.sh   # only tests whose name matches
#   tests/run.sh --build-only    # packages + the five binaries only (README: a fresh clone's run
#                                # command is `tests/run.sh --build-only && build/bin/tessera up`)
set -euo pipefail

build_only=0
[[ "${1:-}" == "--build-only" ]] && build_only=1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"

packages=(
  build-essential cmake ninja-build pkg-config ccache clang libclang-rt-14-dev
  lld  # the linker of the build trees here (TESSERA_LINKER=lld): faster than ld.bfd
  libgtest-dev libgmock-dev libbenchmark-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev nlohmann-json3-dev libboost-dev
  libhiredis-dev libzstd-dev libssl-dev libpcre2-dev libutf8proc-dev
  libyaml-cpp-dev  # placement rules (model/placement)
  redis-server python3 python3-zmq python3-msgpack python3-jinja2 python3-jsonschema curl
  python3-pip python3-setuptools python3-venv
  prometheus  # promtool: cluster_ops_test checks every /metrics with it (skipped when absent)
  chromium    # headless: cluster_observe_test loads /dashboard (skipped when absent)
  dpkg-dev systemd  # cpack's dpkg-shlibdeps, systemd-analyze: package_test (skipped when absent)
  iproute2 python3-yaml  # ip netns / tc: multihost_netns_test (root); YAML: deploy_k8s_manifests_test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tests/run.sh: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- node step (Node client tests; owner: clients/node) ---------------------------------
# node and npm for tests/integration/node_client: Debian's nodejs/npm only when no node is on
# the PATH (a newer one may be installed otherwise). The npm packages themselves (zeromq,
# @msgpack/msgpack, openai, typescript) are installed by that CTest fixture
# (node_client_install_test) from the npm registry into the build tree.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tests/run.sh: installing nodejs npm"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm
fi
# ---- end of node step -------------------------------------------------------------------

shared="${TESSERA_SHARED_DIR:-$root/../shared}"
if ((build_only)); then
  # No tests, so no test data needed (`tessera up` then synthesizes a model if ../shared is absent).
  cmake -S "$root" -B "$build_dir" -G Ninja -DTESSERA_SHARED_DIR="$shared"
  cmake --build "$build_dir" -j "$jobs" --target tessera tessera-scheduler tessera-worker tessera-frontend tessera-kvstore
  echo "tests/run.sh: built $build_dir/bin (run: $build_dir/bin/tessera up)"
  exit 0
fi
if [[ ! -d "$shared/models" ]]; then
  echo "tests/run.sh: test data not found at $shared (set TESSERA_SHARED_DIR)" >&2
  exit 1
fi

cmake_args=(-S "$root" -B "$build_dir" -G Ninja -DTESSERA_SHARED_DIR="$shared")
# Line-table debug info only (-g1: backtraces keep function names and lines): the full -g of
# RelWithDebInfo makes the three build trees ~9 GB, the lean ones about half of that.
if [[ -n "${CMAKE_BUILD_TYPE:-}" ]]; then
  cmake_args+=(-DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE")
else
  cmake_args+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
               "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
fi
[[ -n "${TESSERA_SANITIZE:-}" ]] && cmake_args+=(-DTESSERA_SANITIZE="$TESSERA_SANITIZE")
[[ -n "${TESSERA_CUDA:-}" ]] && cmake_args+=(-DTESSERA_CUDA="$TESSERA_CUDA")
# Every tree links with lld when it is installed (TESSERA_LINKER; the package list above has it):
# half the CPU time of ld.bfd per program (0.06 vs 0.15 s in the main tree, 0.17 vs 0.34 s in the
# ASan one) and a fraction of its wall time on a loaded machine (1-2 s vs 2-13 s).
linker_args=()
command -v ld.lld >/dev/null 2>&1 && linker_args=(-DTESSERA_LINKER=lld)
cmake_args+=("${linker_args[@]}")
# Each step prints how long the script has run when it starts (CI's log shows where time goes).
# ... and the free disk space where the build trees go: a full disk fails a compile or link
# mid-build, and the step lines then show where space ran out.
disk_free_gb() { df -Pk "$(dirname "$build_dir")" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
step_times=()  # "name start_s" of every step, for the summary line at the end
step() {
  echo "tests/run.sh: [${SECONDS} s] $* (disk free: $(disk_free_gb) GB)"
  step_times+=("$1 ${SECONDS}")
}
summary() {  # one line: the seconds each step took
  local line="" i name start next
  for ((i = 0; i < ${#step_times[@]}; i++)); do
    read -r name start <<<"${step_times[i]}"
    next=$SECONDS
    ((i + 1 < ${#step_times[@]})) && next=${step_times[i + 1]##* }
    line+=" $name $((next - start)) s,"
  done
  echo "tests/run.sh: [${SECONDS} s] passed; step times:${line%,}"
}
min_free_gb=10  # main + fuzz + ASan trees, about 5 GB with -g1, plus ccache's growth
if awk -v f="$(disk_free_gb)" -v m="$min_free_gb" 'BEGIN { exit !(f < m) }'; then
  echo "tests/run.sh: WARNING: only $(disk_free_gb) GB free under $(dirname "$build_dir");" \
       "the build trees need about ${min_free_gb} GB (a full disk fails a compile with no diagnostic)" >&2
fi
step main-build "($build_dir)"
cmake "${cmake_args[@]}"
cmake --build "$build_dir" -j "$jobs"

# ---- background builds at idle priority -----------------------------------------------------
# The ASan+UBSan tree is built while the main tree's tests run, and the fuzz tree while the
# ASan+UBSan tests run, each in the background under SCHED_IDLE (chrt --idle; nice 19 where that
# is refused): a build there takes only the CPU time the tests leave unused (they wait on sockets
# and child processes much of the time), so the tests' timings and deadlines see the machine as
# before, and it gets the cores to itself once the tests are done. A build's output is printed
# when it is waited for; one still running when the script ends (a failure) is killed.
idle_prio=(nice -n 19)
chrt --idle 0 true 2>/dev/null && idle_prio=(chrt --idle 0 nice -n 19)
idle_pids=()
fuzz_pids=()  # fuzzers running in the background (each the fuzzer itself: run_fuzzer execs it)
# The EXIT trap keeps the script's status: under `set -e` a failing kill (a process that has
# already ended) inside the trap would otherwise end a passing run with status 1.
end_background() {
  local status=$? p
  set +e
  for p in "${idle_pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  for p in "${fuzz_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  exit "$status"
}
trap end_background EXIT
trap 'exit 130' INT  # Ctrl-C: exit through the EXIT trap (background jobs ignore SIGINT here)
trap 'exit 143' TERM
start_idle() {  # start_idle FUNCTION LOG: FUNCTION (exported) in the background; sets idle_pid
  mkdir -p "$(dirname "$2")"
  # setsid: its own process group (its pid, as the script runs without job control), so the EXIT
  # trap ends the whole build; -w: should setsid have to fork, it still waits and passes the status.
  "${idle_prio[@]}" setsid -w bash -c "$1" >"$2" 2>&1 &
  idle_pid=$!
  idle_pids+=("$idle_pid")
  echo "tests/run.sh: [${SECONDS} s] $1 started in the background (${idle_prio[*]}; log: $2)"
}
finish_idle() {  # finish_idle PID LOG: waits for it and prints its log; a failed build ends the script
  local status=0 p rest=()
  wait "$1" || status=$?
  for p in "${idle_pids[@]}"; do [[ $p == "$1" ]] || rest+=("$p"); done
  idle_pids=("${rest[@]}")
  cat "$2"
  ((status == 0)) || { echo "tests/run.sh: the build logged in $2 failed (exit $status)" >&2; exit 1; }
}
linker_arg="${linker_args[*]:-}"
export root shared jobs linker_arg

# ---- sanitizer tree (ASan + UBSan; owner: sanitize) ----------------------------------------
# build-asan: TESSERA_SANITIZE="address;undefined", -O1 -g1, no CUDA, no benchmarks; it builds
# only what its tests run: each selected test's own program (read from the tree's
# CTestTestfile.cmake files, so a new test is picked up with no edit here) plus the five binaries
# that the integration and script tests start — not the tests left out below, not the static
# client library. Its tests run after the main tree's (docs/building.md, "Sanitizer builds").
# Skipped with TESSERA_SKIP_SANITIZE=1, when the main build is itself a sanitizer build, and when
# TEST_FILTER is set (run it by hand: docs/building.md).
# Time guard: when the script has already run longer than TESSERA_SANITIZE_SKIP_AFTER_S (default
# 1200 s: a machine whose main build was several times slower than usual) once the main build
# is done, the step is skipped with a message so that the whole run stays inside CI's limit.
# Left out of the ASan+UBSan tests: cli_options_test and docs_configuration_test (they read the
# benchmarks' --help, not built here, and exercise no memory path the other tests miss), and the client
# library suites python_client_* and node_client_* (they test the Python/Node packages and
# install them; the servers they talk to are covered by the C++ integration suites), the C++
# client's install test (a CMake configure and build of an example), package_test (it packages
# and boots the instrumented binaries under systemd's sandbox, which ASan's shadow mapping does
# not fit; it runs in the normal tree), llamacpp_agreement_test
# (114 model fixtures: minutes of pure arithmetic under ASan, covered by the kernel and engine
# unit tests), jinja_fixtures_fresh (Python only), cluster_observe_test (headless Chromium),
# tokenizer_conformance_test with its npm fixture (pure string arithmetic, 6,000 cases; the
# tokenizer's unit tests run here) and deploy_k8s_manifests_test (Python over YAML files);
# and, inside cluster_integration_test, the suites whose assertions are deadlines of a second or
# two (SlowClientTest: write/header timeouts; ClusterDrainTest: drain timeouts), which ASan's 2-3x
# slowdown turns into false failures — they run in the normal tree.
sanitize_skip_after="${TESSERA_SANITIZE_SKIP_AFTER_S:-1200}"
asan_exclude='^(cli_options_test|docs_configuration_test|python_client_.*|node_client_.*|cpp_client_install_test|package_test|llamacpp_agreement_test|jinja_fixtures_fresh|cluster_observe_test|tokenizer_reference_setup|tokenizer_conformance_test|deploy_k8s_manifests_test)$'
asan_dir="${ASAN_BUILD_DIR:-$root/build-asan}"
asan_build() {  # background job: configure build-asan, build what its tests run
  set -euo pipefail
  cmake -S "$root" -B "$asan_dir" -G Ninja -DTESSERA_SHARED_DIR="$shared" -DTESSERA_SANITIZE="address;undefined" \
    -DTESSERA_CUDA=OFF -DTESSERA_BENCHES=OFF -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1" ${linker_arg:+"$linker_arg"}
  # The programs of $asan_dir/bin that the selected tests run (a test whose command is a script
  # or an interpreter gets the five binaries below; if one ever needs another program, add it).
  local programs targets
  programs=$(python3 - "$asan_dir" "$asan_exclude" <<'PY'
import json, os, re, subprocess, sys
build, exclude = sys.argv[1], sys.argv[2]
listing = subprocess.run(["ctest", "--test-dir", build, "-N", "-E", exclude, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
selected = {t["name"] for t in json.loads(listing)["tests"]}
bin_dir = os.path.realpath(os.path.join(build, "bin"))
add_test = re.compile(r'^\s*add_test\(\[=\[(.*?)\]=\] "([^"]*)"')
programs = set()
for top, _, files in os.walk(build):
    if "CTestTestfile.cmake" in files:
        with open(os.path.join(top, "CTestTestfile.cmake")) as f:
            for line in f:
                m = add_test.match(line)
                if m and m.group(1) in selected and os.path.realpath(os.path.dirname(m.group(2))) == bin_dir:
                    programs.add(os.path.basename(m.group(2)))
print(" ".join(sorted(programs)))
PY
)
  read -ra targets <<<"$programs"
  echo "tests/run.sh: building ${#targets[@]} test programs and the five binaries in $asan_dir"
  cmake --build "$asan_dir" -j "$jobs" --target "${targets[@]}" \
    tessera tessera-scheduler tessera-worker tessera-frontend tessera-kvstore
  echo "tests/run.sh: the ASan+UBSan build took ${SECONDS} s (in the background)"
}
asan_pid=""
if [[ -z "${TESSERA_SKIP_SANITIZE:-}" && -z "${TESSERA_SANITIZE:-}" && -z "${TEST_FILTER:-}" ]]; then
  if ((SECONDS > sanitize_skip_after)); then
    echo "tests/run.sh: SKIPPING the ASan+UBSan step: ${SECONDS} s have passed (> TESSERA_SANITIZE_SKIP_AFTER_S=${sanitize_skip_after})" >&2
  else
    export -f asan_build
    export asan_dir asan_exclude
    start_idle asan_build "$asan_dir/ci-build.log"
    asan_pid=$idle_pid
  fi
fi

# ---- fuzz tree (model-file parsers: owner loaders; message decoders: owner sanitize) --------
# When clang is installed: builds only the libFuzzer targets in build-fuzz (clang,
# TESSERA_FUZZ=ON) — in the background while the ASan+UBSan tests run —, then seeds each with its
# crafted inputs (fuzz_write_seeds) — plus the real stories260K.gguf for gguf — and runs each for
# 15 s, $jobs of them at a time (one core each; each one's output is printed when it ends). A
# crash fails the script. Skip with TESSERA_SKIP_FUZZ=1; with TEST_FILTER set it runs only when
# the filter mentions "fuzz".
# Targets (docs/building.md, "Fuzzing"): gguf, safetensors (model files), protocol (protocol v1
# msgpack), kvstore_messages (the kvstore's msgpack), frontend_request (HTTP bodies and
# client-API msgpack -> prepared requests), kvstore_blob (packed K/V blobs, every codec).
fuzz_dir="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
fuzz_targets=(gguf safetensors protocol kvstore_messages frontend_request kvstore_blob)
fuzz_programs="${fuzz_targets[*]/%/_fuzz} fuzz_write_seeds"
fuzz_build() {  # background job: configure build-fuzz, build the fuzz targets and the seed writer
  set -euo pipefail
  local programs
  read -ra programs <<<"$fuzz_programs"
  cmake -S "$root" -B "$fuzz_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_BENCHES=OFF -DTESSERA_SHARED_DIR="$shared" ${linker_arg:+"$linker_arg"}
  cmake --build "$fuzz_dir" -j "$jobs" --target "${programs[@]}"
  echo "tests/run.sh: the fuzz build took ${SECONDS} s (in the background)"
}
fuzz_pid=""
start_fuzz_build() {
  if [[ -z "${TESSERA_SKIP_FUZZ:-}" ]] && command -v clang++ >/dev/null 2>&1 &&
     [[ -z "${TEST_FILTER:-}" || "${TEST_FILTER}" == *fuzz* ]]; then
    export -f fuzz_build
    export fuzz_dir fuzz_programs
    start_idle fuzz_build "$fuzz_dir/ci-build.log"
    fuzz_pid=$idle_pid
  fi
}

# ---- unit and integration tests of the main tree (right after its build: the step that must
# run whatever happens to the time budget; the longest tests start first, see COST in CMake) --
ctest_args=(--test-dir "$build_dir" --output-on-failure -j "$jobs")
[[ -n "${TEST_FILTER:-}" ]] && ctest_args+=(-R "$TEST_FILTER")
step main-tests "(unit and integration tests, $build_dir)"
ctest "${ctest_args[@]}"

# ---- ASan+UBSan tests -----------------------------------------------------------------------
# TESSERA_TIMING_SCALE=4 (tests/support/include/tessera/testing/wait.h, scaled()): the wall-clock
# bounds that tests assert (a detection or re-registration within N ms) are 4x wider here, where
# every process runs 2-5x slower.
# Every process the tests start inherits ASAN_OPTIONS/UBSAN_OPTIONS, whose log_path collects each
# report in $asan_dir/reports/; a report from any process (a test or a child server) fails the
# step and is printed, even when the test itself passed.
if [[ -n "$asan_pid" ]]; then
  step asan-build-rest "(waiting for the ASan+UBSan build, $asan_dir)"
  finish_idle "$asan_pid" "$asan_dir/ci-build.log"
  start_fuzz_build
  step asan-tests "(ASan+UBSan tests)"
  rm -rf "$asan_dir/reports" && mkdir -p "$asan_dir/reports"
  asan_status=0
  ASAN_OPTIONS="log_path=$asan_dir/reports/asan:detect_leaks=1:strict_string_checks=1:check_initialization_order=1" \
  UBSAN_OPTIONS="log_path=$asan_dir/reports/ubsan:print_stacktrace=1:halt_on_error=1" \
  LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  TESSERA_TIMING_SCALE="${TESSERA_TIMING_SCALE:-4}" \
  GTEST_FILTER='-SlowClientTest.*:ClusterDrainTest.*' \
    ctest --test-dir "$asan_dir" --output-on-failure -j "$jobs" -E "$asan_exclude" ||
    asan_status=$?
  if compgen -G "$asan_dir/reports/*" >/dev/null; then
    echo "tests/run.sh: sanitizer reports (ASan/UBSan/LSan):" >&2
    for f in "$asan_dir"/reports/*; do echo "==== $f" >&2; cat "$f" >&2; done
    asan_status=1
  fi
  ((asan_status == 0)) || { echo "tests/run.sh: the ASan+UBSan step failed" >&2; exit 1; }
else
  start_fuzz_build
fi

# ---- fuzzing ------------------------------------------------------------------------------------
if [[ -n "$fuzz_pid" ]]; then
  step fuzz "(the rest of the fuzz build, then ${#fuzz_targets[@]} targets x 15 s, $fuzz_dir)"
  finish_idle "$fuzz_pid" "$fuzz_dir/ci-build.log"
  corpus="$fuzz_dir/corpus"
  rm -rf "$corpus"
  for target in "${fuzz_targets[@]}"; do
    kind="${target%_messages}"
    kind="${kind%_request}"
    mkdir -p "$corpus/$target"
    "$fuzz_dir/bin/fuzz_write_seeds" --kind "$kind" --write-seeds "$corpus/$target"
  done
  cp "$shared/models/stories260K/stories260K.gguf" "$corpus/gguf/"
  run_fuzzer() {  # 15 s of one target; its output goes to $fuzz_dir/fuzz-TARGET.log
    local target=$1 max_len=65536  # messages and request bodies; model files need room for a whole tiny model
    [[ $target == gguf || $target == safetensors ]] && max_len=1300000
    TESSERA_SHARED_DIR="$shared" exec "$fuzz_dir/bin/${target}_fuzz" -max_total_time=15 -max_len=$max_len -print_final_stats=1 \
      -artifact_prefix="$fuzz_dir/crash-$target-" "$corpus/$target" >"$fuzz_dir/fuzz-$target.log" 2>&1
  }
  fuzz_failed=()
  for ((i = 0; i < ${#fuzz_targets[@]}; i += jobs)); do
    batch=("${fuzz_targets[@]:i:jobs}")
    pids=()
    for target in "${batch[@]}"; do
      echo "tests/run.sh: fuzzing $target for 15 s"
      run_fuzzer "$target" &
      pids+=($!)
      fuzz_pids+=($!)
    done
    for j in "${!batch[@]}"; do
      status=0
      wait "${pids[j]}" || status=$?
      echo "tests/run.sh: ---- ${batch[j]}_fuzz (exit $status)"
      cat "$fuzz_dir/fuzz-${batch[j]}.log"
      ((status == 0)) || fuzz_failed+=("${batch[j]}")
    done
  done
  if ((${#fuzz_failed[@]})); then
    echo "tests/run.sh: fuzzing failed: ${fuzz_failed[*]} (inputs: $fuzz_dir/crash-*)" >&2
    exit 1
  fi
fi
summary
