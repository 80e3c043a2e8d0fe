#!/usr/bin/env bash
# The one test command: installs build dependencies (Debian packages), builds everything,
# and runs every test (unit + integration) through CTest.
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
# Each step prints how long the script has run when it starts (CI's log shows where time goes).
# ... and the free disk space where the build trees go: a full disk fails a compile or link
# mid-build, and the step lines then show where space ran out.
disk_free_gb() { df -Pk "$(dirname "$build_dir")" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
step() { echo "tests/run.sh: [${SECONDS} s] $* (disk free: $(disk_free_gb) GB)"; }
min_free_gb=10  # main + fuzz + ASan trees, about 5 GB with -g1, plus ccache's growth
if awk -v f="$(disk_free_gb)" -v m="$min_free_gb" 'BEGIN { exit !(f < m) }'; then
  echo "tests/run.sh: WARNING: only $(disk_free_gb) GB free under $(dirname "$build_dir");" \
       "the build trees need about ${min_free_gb} GB (a full disk fails a compile with no diagnostic)" >&2
fi
step "main build ($build_dir)"
cmake "${cmake_args[@]}"
cmake --build "$build_dir" -j "$jobs"
step "main build done"


# ---- fuzz step (model-file parsers: owner loaders; message decoders: owner sanitize) -----
# When clang is installed: builds only the libFuzzer targets in build-fuzz (clang,
# TESSERA_FUZZ=ON), seeds each with its crafted inputs (fuzz_write_seeds) — plus the real
# stories260K.gguf for gguf — and runs each for 15 s. A crash fails the script (set -e). Skip
# with TESSERA_SKIP_FUZZ=1; with TEST_FILTER set it runs only when the filter mentions "fuzz".
# Targets (docs/building.md, "Fuzzing"): gguf, safetensors (model files), protocol (protocol v1
# msgpack), kvstore_messages (the kvstore's msgpack), frontend_request (HTTP bodies and
# client-API msgpack -> prepared requests), kvstore_blob (packed K/V blobs, every codec).
if [[ -z "${TESSERA_SKIP_FUZZ:-}" ]] && command -v clang++ >/dev/null 2>&1 &&
   [[ -z "${TEST_FILTER:-}" || "${TEST_FILTER}" == *fuzz* ]]; then
  fuzz_dir="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
  step "fuzz build ($fuzz_dir)"
  fuzz_targets=(gguf safetensors protocol kvstore_messages frontend_request kvstore_blob)
  cmake -S "$root" -B "$fuzz_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_BENCHES=OFF -DTESSERA_SHARED_DIR="$shared"
  cmake --build "$fuzz_dir" -j "$jobs" --target "${fuzz_targets[@]/%/_fuzz}" fuzz_write_seeds
  corpus="$fuzz_dir/corpus"
  rm -rf "$corpus"
  for target in "${fuzz_targets[@]}"; do
    kind="${target%_messages}"
    kind="${kind%_request}"
    mkdir -p "$corpus/$target"
    "$fuzz_dir/bin/fuzz_write_seeds" --kind "$kind" --write-seeds "$corpus/$target"
  done
  cp "$shared/models/stories260K/stories260K.gguf" "$corpus/gguf/"
  for target in "${fuzz_targets[@]}"; do
    max_len=65536  # messages and request bodies; model files need room for a whole tiny model
    [[ $target == gguf || $target == safetensors ]] && max_len=1300000
    echo "tests/run.sh: fuzzing $target for 15 s"
    TESSERA_SHARED_DIR="$shared" "$fuzz_dir/bin/${target}_fuzz" -max_total_time=15 -max_len=$max_len -print_final_stats=1 \
      -artifact_prefix="$fuzz_dir/crash-$target-" "$corpus/$target"
  done
fi
# ---- end of fuzz step -------------------------------------------------------------------

# ---- sanitizer step (ASan + UBSan; owner: sanitize) -------------------------------------
# Builds a second tree, build-asan (TESSERA_SANITIZE="address;undefined", -O1 -g1, no CUDA, no
# benchmarks), and runs the unit and integration tests there (docs/building.md, "Sanitizer
# builds"). Every process the tests start inherits ASAN_OPTIONS/UBSAN_OPTIONS, whose log_path
# collects each report in $asan_dir/reports/; a report from any process (a test or a child
# server) fails the step and is printed, even when the test itself passed. Skipped with
# TESSERA_SKIP_SANITIZE=1, when the main build is itself a sanitizer build, and when TEST_FILTER
# is set (run it by hand: docs/building.md).
# Left out there: cli_options_test and docs_configuration_test (they read the benchmarks'
# --help, not built here, and exercise no memory path the other tests miss), and the client
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
# Time guard: the step costs a second full build; when the script has already run longer than
# TESSERA_SANITIZE_SKIP_AFTER_S (default 1200 s: a cold machine whose main build was slow), it is
# skipped with a message so that the whole run stays well inside CI's limit.
sanitize_skip_after="${TESSERA_SANITIZE_SKIP_AFTER_S:-1200}"
if [[ -z "${TESSERA_SKIP_SANITIZE:-}" && -z "${TESSERA_SANITIZE:-}" && -z "${TEST_FILTER:-}" ]] &&
   ((SECONDS > sanitize_skip_after)); then
  echo "tests/run.sh: SKIPPING the ASan+UBSan step: ${SECONDS} s have passed (> TESSERA_SANITIZE_SKIP_AFTER_S=${sanitize_skip_after})" >&2
elif [[ -z "${TESSERA_SKIP_SANITIZE:-}" && -z "${TESSERA_SANITIZE:-}" && -z "${TEST_FILTER:-}" ]]; then
  asan_dir="${ASAN_BUILD_DIR:-$root/build-asan}"
  step "ASan+UBSan build ($asan_dir)"
  cmake -S "$root" -B "$asan_dir" -G Ninja -DTESSERA_SHARED_DIR="$shared" -DTESSERA_SANITIZE="address;undefined" \
    -DTESSERA_CUDA=OFF -DTESSERA_BENCHES=OFF -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1"
  cmake --build "$asan_dir" -j "$jobs"
  step "ASan+UBSan tests"
  rm -rf "$asan_dir/reports" && mkdir -p "$asan_dir/reports"
  asan_status=0
  ASAN_OPTIONS="log_path=$asan_dir/reports/asan:detect_leaks=1:strict_string_checks=1:check_initialization_order=1" \
  UBSAN_OPTIONS="log_path=$asan_dir/reports/ubsan:print_stacktrace=1:halt_on_error=1" \
  LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
  GTEST_FILTER='-SlowClientTest.*:ClusterDrainTest.*' \
    ctest --test-dir "$asan_dir" --output-on-failure -j "$jobs" \
    -E '^(cli_options_test|docs_configuration_test|python_client_.*|node_client_.*|cpp_client_install_test|package_test|llamacpp_agreement_test|jinja_fixtures_fresh|cluster_observe_test|tokenizer_reference_setup|tokenizer_conformance_test|deploy_k8s_manifests_test)$' ||
    asan_status=$?
  if compgen -G "$asan_dir/reports/*" >/dev/null; then
    echo "tests/run.sh: sanitizer reports (ASan/UBSan/LSan):" >&2
    for f in "$asan_dir"/reports/*; do echo "==== $f" >&2; cat "$f" >&2; done
    asan_status=1
  fi
  ((asan_status == 0)) || { echo "tests/run.sh: the ASan+UBSan step failed" >&2; exit 1; }
fi
# ---- end of sanitizer step --------------------------------------------------------------

# ---- unit and integration tests (last, so CTest's summary closes the output) -----------
ctest_args=(--test-dir "$build_dir" --output-on-failure -j "$jobs")
[[ -n "${TEST_FILTER:-}" ]] && ctest_args+=(-R "$TEST_FILTER")
step "unit and integration tests"
ctest "${ctest_args[@]}"
