#!/usr/bin/env bash
# tests/run.sh leaves no fuzzer running when it is interrupted: its trap block and its fuzzing loop
# (taken from the real script by their first/last lines) run with fake fuzzers that would sleep
# 60 s; the script gets SIGINT (as from Ctrl-C: default disposition, python3 resets the ignore a
# background job inherits) and SIGTERM while they run, and no fake fuzzer may survive it.
#   run_sh_fuzz_trap_test.sh SOURCE_DIR
set -euo pipefail
src="$1/tests/run.sh"
work=$(mktemp -d)
marker="$work/fake_fuzz"
cleanup() {
  for p in $(pgrep -f "$marker" || true); do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin" "$work/corpus"
printf '#!/usr/bin/env bash\nexec -a "%s" sleep 60\n' "$marker" >"$work/bin/fake_fuzz"
chmod +x "$work/bin/fake_fuzz"
{
  echo 'set -euo pipefail'
  echo "jobs=2; fuzz_dir='$work'; shared='$work'; corpus='$work/corpus'; fuzz_targets=(a b)"
  sed -n '/^idle_pids=()/,/^start_idle()/p' "$src" | sed '$d'
  sed -n '/^  run_fuzzer() {/,/^  if ((${#fuzz_failed/p' "$src" | sed '$d' |
    sed "s|\"\$fuzz_dir/bin/\${target}_fuzz\"|'$work/bin/fake_fuzz'|"
} >"$work/harness.sh"
grep -q fake_fuzz "$work/harness.sh" || { echo "FAIL: the fuzzing loop of tests/run.sh was not found" >&2; exit 1; }
status=0
for sig in INT TERM; do
  python3 -c "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp('bash', ['bash', sys.argv[1]])" \
    "$work/harness.sh" >"$work/harness.log" 2>&1 &
  script=$!
  for _ in $(seq 100); do  # wait (up to 10 s) for both fake fuzzers
    [[ $(pgrep -fc "$marker" || true) -ge 2 ]] && break
    sleep 0.1
  done
  [[ $(pgrep -fc "$marker" || true) -ge 2 ]] || { echo "FAIL: the fake fuzzers did not start" >&2; cat "$work/harness.log"; exit 1; }
  kill -"$sig" "$script"
  wait "$script" || true
  left=0
  for _ in $(seq 50); do  # up to 5 s for them to go
    left=$(pgrep -fc "$marker" || true)
    [[ $left -eq 0 ]] && break
    sleep 0.1
  done
  if [[ $left -ne 0 ]]; then
    echo "FAIL: SIG$sig to tests/run.sh left $left fuzzer(s) running" >&2
    status=1
    for p in $(pgrep -f "$marker" || true); do kill "$p" 2>/dev/null || true; done
  else
    echo "ok: SIG$sig to tests/run.sh ended its fuzzers"
  fi
done
exit $status
