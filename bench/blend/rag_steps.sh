#!/usr/bin/env bash
# TTFT of CacheBlend when a prompt takes several steps (docs/BENCHMARKS.md "CacheBlend over several
# steps: TTFT"): for each scheduler step budget, a fresh `tessera up` cluster (frontend, scheduler,
# one CPU worker at 1 thread) and `tessera bench --workload rag` in modes blend and none (a full
# prefill: nothing reused), once per seed; the JSON reports land in OUT_DIR/steps-BUDGET-seed-S.json.
#
#   bench/blend/rag_steps.sh BUILD_BIN MODEL OUT_DIR "64 128 256 2048" "1 2 3" [extra bench args...]
set -euo pipefail
bin=$1 model=$2 out=$3 budgets=$4 seeds=$5
shift 5
mkdir -p "$out"
port=29500
for budget in $budgets; do
  "$bin/tessera" up --model "$model" --http-port $port --zmq-port $((port + 1)) --scheduler-port $((port + 10)) \
    --kvstore false --worker-threads 1 --num-pages 1024 --insecure true --max-step-tokens "$budget" --max-running 4 \
    >"$out/up-$budget.log" 2>&1 &
  up=$!
  for _ in $(seq 600); do  # up to 60 s for the cluster (every worker registered)
    grep -q "tessera up: cluster ready" "$out/up-$budget.log" && break
    sleep 0.1
  done
  worker=$(pgrep -f "tessera-worker.*$((port + 11))" | head -1)
  for seed in $seeds; do
    uptime >"$out/load-$budget-$seed.txt"
    "$bin/tessera" bench --port $port --workload rag --rag-modes blend,none --concurrency 1 --max-tokens 1 \
      --progress-s 0 --seed "$seed" --cpu-pids "$worker" --scheduler-metrics-port $((port + 12)) \
      --json "$out/steps-$budget-seed-$seed.json" "$@" >"$out/steps-$budget-seed-$seed.txt" 2>&1
    uptime >>"$out/load-$budget-$seed.txt"
  done
  kill -TERM $up
  wait $up || true
done
