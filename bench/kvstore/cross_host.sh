#!/usr/bin/env bash
# get_many across hosts (docs/BENCHMARKS.md "get_many across hosts"): the kvstore (kvstore_bench's
# in-process Server and Client) on host kvbench-a, redis-server on host kvbench-b, a round trip of
# RTT between them (two_hosts.sh: netem, or nfq_delay where the kernel lacks sch_netem); for each
# RTT and each --get-many-inflight-kb setting (0 = one GET round trip per key), REPEATS runs of
# `kvstore_bench --redis 10.88.0.2:6390`, interleaved. Output: OUT_DIR/rtt-R-kb-K-run-N.txt, and
# OUT_DIR/rtt-R.latency (redis-cli --latency between the hosts).
#
#   bench/kvstore/cross_host.sh BUILD_BIN OUT_DIR "0 500 1000 2000" "0 256" REPEATS [kvstore_bench args...]
# As root. BUILD_BIN holds kvstore_bench (and nfq_delay when there is no sch_netem).
set -euo pipefail
bin=$1 out=$2 rtts=$3 kbs=$4 repeats=$5
shift 5
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
redis_pid=""
cleanup() {
  [[ -n "$redis_pid" ]] && kill "$redis_pid" 2>/dev/null || true
  "$here/two_hosts.sh" down
}
trap cleanup EXIT
for rtt in $rtts; do
  "$here/two_hosts.sh" up "$rtt" "$bin/nfq_delay" | tee "$out/rtt-$rtt.setup"
  ip netns exec kvbench-b redis-server --bind 10.88.0.2 --port 6390 --save '' --appendonly no --protected-mode no \
    >"$out/redis-$rtt.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    ip netns exec kvbench-a redis-cli -h 10.88.0.2 -p 6390 ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  ip netns exec kvbench-a timeout 3 redis-cli -h 10.88.0.2 -p 6390 --latency -i 1 >"$out/rtt-$rtt.latency" 2>&1 || true
  for run in $(seq "$repeats"); do
    for kb in $kbs; do
      uptime >"$out/rtt-$rtt-kb-$kb-run-$run.txt"
      ip netns exec kvbench-a "$bin/kvstore_bench" --redis 10.88.0.2:6390 --get-many-inflight-kb "$kb" "$@" \
        >>"$out/rtt-$rtt-kb-$kb-run-$run.txt" 2>&1
    done
  done
  kill "$redis_pid"
  wait "$redis_pid" || true
  redis_pid=""
  "$here/two_hosts.sh" down
done
