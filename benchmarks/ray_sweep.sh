#!/usr/bin/env bash
# Sweep wall-clock of the same 8 short runs: local process pool against a local Ray, with
# 1 and 2 workers, interleaved over rounds (processes-1, ray-1, processes-2, ray-2, ...).
# Prints one line per sweep (wall-clock, the runs' own wall_time summed, load average),
# the time of ray.init(num_cpus=2) alone, and whether every sweep's results are identical.
#
#   OMP_NUM_THREADS=1 bash benchmarks/ray_sweep.sh [OUT_DIR] [ROUNDS]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-ray-sweep-bench}"
ROUNDS="${2:-2}"
PY="$ROOT/.venv/bin/python"
mkdir -p "$OUT" && cd "$OUT"
ARGS="--algo ppo --env CartPole-v1 --seeds 0-7 --max-epoch 2 --step-per-epoch 2048 \
--num-test-envs 2 --episode-per-test 2 --no-progress"
for round in $(seq 1 "$ROUNDS"); do
  for cfg in "processes 1" "ray 1" "processes 2" "ray 2"; do
    set -- $cfg
    out="out-$1-$2-r$round"
    rm -rf "$out"
    load0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$PY" -m epochtrain sweep $ARGS --backend "$1" --workers "$2" --out "$out" > "$out.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    load1=$(cut -d' ' -f1 /proc/loadavg)
    "$PY" - "$out" "$round" "$1" "$2" "$rc" "$t0" "$t1" "$load0" "$load1" <<'PY'
import json, sys
from pathlib import Path
out, rnd, backend, workers, rc, t0, t1, l0, l1 = sys.argv[1:]
runs = sum(json.loads(p.read_text())["wall_time"] for p in Path(out).glob("*/result.json"))
print(f"round={rnd} backend={backend} workers={workers} rc={rc} "
      f"wall={float(t1) - float(t0):.1f} runs_sum={runs:.1f} load={l0}->{l1}")
PY
  done
done
"$PY" - <<'PY'
import time
import ray
start = time.perf_counter()
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
print(f"ray.init(num_cpus=2): {time.perf_counter() - start:.1f} s")
ray.shutdown()
PY
"$PY" - <<'PY'
from pathlib import Path
from epochtrain.experiment import load_experiment
def curves(out):  # each run's status and test curve: what a sweep computed, not its timing
    runs = load_experiment(out).runs
    return {r.run_id: (r.status, r.steps.tolist(), r.test_returns.tolist()) for r in runs}
outs = sorted(p for p in Path(".").glob("out-*") if p.is_dir())
first = curves(outs[0])
for out in outs:
    same = curves(out) == first
    print(out.name, "identical results" if same else "DIFFERENT results", len(first), "runs")
PY
