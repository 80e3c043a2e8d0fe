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
  libhiredis-dev libzstd-dev libssl-dev libpcre2-dev
  redis-server python3 python3-zmq python3-msgpack python3-jinja2 python3-jsonschema curl
  python3-pip python3-setuptools python3-venv
  prometheus  # promtool: cluster_ops_test checks every /metrics with it (skipped when absent)
  chromium    # headless: cluster_observe_test loads /dashboard (skipped when absent)
  dpkg-dev systemd  # cpack's dpkg-shlibdeps, systemd-analyze: package_test (skipped when absent)
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
[[ -n "${CMAKE_BUILD_TYPE:-}" ]] && cmake_args+=(-DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE")
[[ -n "${TESSERA_SANITIZE:-}" ]] && cmake_args+=(-DTESSERA_SANITIZE="$TESSERA_SANITIZE")
[[ -n "${TESSERA_CUDA:-}" ]] && cmake_args+=(-DTESSERA_CUDA="$TESSERA_CUDA")
cmake "${cmake_args[@]}"
cmake --build "$build_dir" -j "$jobs"


# ---- fuzz step (model-file parsers; owner: loaders) -------------------------------------
# When clang is installed: builds only the libFuzzer targets in build-fuzz (clang,
# TESSERA_FUZZ=ON), seeds them with crafted files plus the real stories260K.gguf, and runs
# each for 15 s. A crash fails the script (set -e). Skip with TESSERA_SKIP_FUZZ=1; with
# TEST_FILTER set it runs only when the filter mentions "fuzz".
if [[ -z "${TESSERA_SKIP_FUZZ:-}" ]] && command -v clang++ >/dev/null 2>&1 &&
   [[ -z "${TEST_FILTER:-}" || "${TEST_FILTER}" == *fuzz* ]]; then
  fuzz_dir="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
  cmake -S "$root" -B "$fuzz_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DTESSERA_FUZZ=ON -DTESSERA_CUDA=OFF -DTESSERA_SHARED_DIR="$shared"
  cmake --build "$fuzz_dir" -j "$jobs" --target gguf_fuzz safetensors_fuzz fuzz_write_seeds
  corpus="$fuzz_dir/corpus"
  rm -rf "$corpus"
  mkdir -p "$corpus/gguf" "$corpus/safetensors"
  "$fuzz_dir/bin/fuzz_write_seeds" --kind gguf --write-seeds "$corpus/gguf"
  "$fuzz_dir/bin/fuzz_write_seeds" --kind safetensors --write-seeds "$corpus/safetensors"
  cp "$shared/models/stories260K/stories260K.gguf" "$corpus/gguf/"
  for target in gguf safetensors; do
    echo "tests/run.sh: fuzzing $target for 15 s"
    "$fuzz_dir/bin/${target}_fuzz" -max_total_time=15 -max_len=1300000 -print_final_stats=1 \
      -artifact_prefix="$fuzz_dir/crash-$target-" "$corpus/$target"
  done
fi
# ---- end of fuzz step -------------------------------------------------------------------

# ---- unit and integration tests (last, so CTest's summary closes the output) -----------
ctest_args=(--test-dir "$build_dir" --output-on-failure -j "$jobs")
[[ -n "${TEST_FILTER:-}" ]] && ctest_args+=(-R "$TEST_FILTER")
ctest "${ctest_args[@]}"
