#!/usr/bin/env bash
# The one test command: installs build dependencies (Debian packages), builds everything,
# and runs every test (unit + integration) through CTest.
#
#   tests/run.sh                 # Release-ish build in build/, all tests
#   BUILD_DIR=build-asan TESSERA_SANITIZE="address;undefined" tests/run.sh
#   TEST_FILTER=scheduler tests/run.sh   # only tests whose name matches
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"

packages=(
  build-essential cmake ninja-build pkg-config ccache clang
  libgtest-dev libgmock-dev libbenchmark-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev nlohmann-json3-dev libboost-dev
  libhiredis-dev libzstd-dev libssl-dev libpcre2-dev
  redis-server python3 python3-zmq python3-msgpack curl
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

shared="${TESSERA_SHARED_DIR:-$root/../shared}"
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

ctest_args=(--test-dir "$build_dir" --output-on-failure -j "$jobs")
[[ -n "${TEST_FILTER:-}" ]] && ctest_args+=(-R "$TEST_FILTER")
ctest "${ctest_args[@]}"
