#!/usr/bin/env bash
# Interleaved comparison of engine_bench and llama.cpp's llama-bench on the same GGUF files and
# the same thread count: for every model, ours then theirs, each with REPS timed runs (after a
# warm-up run each), so both see similar machine load. Prints our medians, and llama-bench's
# per-run rates (jsonl samples_ts) with their median (docs/BENCHMARKS.md).
#
#   bench/engine/compare_with_llama_cpp.sh build/bin/engine_bench /path/to/llama-bench a.gguf b.gguf
#   REPS=3 THREADS=2 PROMPT=512 GEN=128 (defaults)
set -euo pipefail
engine_bench="$1"
llama_bench="$2"
shift 2
reps="${REPS:-3}"
threads="${THREADS:-2}"
prompt="${PROMPT:-512}"
gen="${GEN:-128}"
for model in "$@"; do
  echo "== $model, $threads threads ($(uptime | sed 's/.*load average/load average/'))"
  echo "-- tessera engine_bench"
  "$engine_bench" --model "$model" --threads "$threads" --prompt "$prompt" --gen "$gen" --reps "$reps"
  echo "-- llama.cpp llama-bench ($(uptime | sed 's/.*load average/load average/'))"
  "$llama_bench" -m "$model" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" -o jsonl 2>/dev/null |
    /usr/bin/python3 -c '
import json, statistics, sys
for line in sys.stdin:
    r = json.loads(line)
    name = ("pp%d" % r["n_prompt"]) if r["n_prompt"] else ("tg%d" % r["n_gen"])
    s = r["samples_ts"]
    print("%-6s median %.2f tok/s  runs %s" % (name, statistics.median(s), ", ".join("%.2f" % x for x in s)))
'
done
