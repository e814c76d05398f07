#!/usr/bin/env bash
# GPU telemetry check, for a machine with an NVIDIA GPU, its driver and nvidia-ml-py
# (pip install -e '.[gpu]'). In a temporary folder it starts a server and one worker that
# samples every second, runs a job pinned to one GPU that keeps it busy for about 20 s
# (torch when the job's python has it, else an nvidia-smi query loop), prints
# `rbs job telemetry --json` and checks that a sample has a GPU with nonzero use or memory.
# Exit 0: checked; 1: no GPU field was nonzero (or a step failed); 77: not a GPU machine.
# Usage: scripts/gpu_check.sh [GPU_ID]   (RBS, PYTHON: the rbs and python to use)
set -euo pipefail
gpu=${1:-0}
RBS=${RBS:-rbs}
PY=${PYTHON:-python3}
command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: not a GPU machine"; exit 77; }
"$PY" -c 'import pynvml' 2>/dev/null || { echo "gpu_check: $PY has no nvidia-ml-py (pip install nvidia-ml-py)"; exit 77; }

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

wait_file() {  # FILE WHAT LOG: up to 120 s
    for _ in $(seq 1 240); do
        [ -s "$1" ] && return 0
        sleep 0.5
    done
    echo "gpu_check: no $2 after 120 s; its log:"; tail -n 30 "$3"; exit 1
}

"$RBS" remote serve --port 0 --data-dir "$tmp/data" --ready-file "$tmp/server.json" \
    >"$tmp/server.log" 2>&1 &
pids+=($!)
wait_file "$tmp/server.json" "server" "$tmp/server.log"
port=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["port"])' "$tmp/server.json")
server="127.0.0.1:$port"

"$RBS" remote worker --server "$server" --work-dir "$tmp/worker" --gpus "$gpu" \
    --telemetry-interval 1 --ready-file "$tmp/worker.json" >"$tmp/worker.log" 2>&1 &
pids+=($!)
wait_file "$tmp/worker.json" "worker" "$tmp/worker.log"

burn='
import subprocess, time
end = time.time() + 20
try:
    import torch
    x = torch.randn(8192, 8192, device="cuda")
    while time.time() < end:
        x = torch.nn.functional.normalize(x @ x)
    torch.cuda.synchronize()
    print("burned the GPU with torch")
except ImportError:
    while time.time() < end:
        subprocess.run(["nvidia-smi", "-q", "-d", "UTILIZATION"], stdout=subprocess.DEVNULL)
    print("no torch: polled the GPU with nvidia-smi")
'
job=$("$RBS" job submit --server "$server" --gpus 1 --time 5m -- "$PY" -c "$burn")
echo "gpu_check: job $job on GPU $gpu"
"$RBS" job wait --server "$server" "$job" || true
"$RBS" job logs --server "$server" "$job" | tail -n 5
"$RBS" job telemetry --server "$server" --json "$job" | tee "$tmp/telemetry.jsonl"
"$PY" - "$tmp/telemetry.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
gpus = [g for r in rows for g in r.get("gpus", [])]
busy = [g for g in gpus if g.get("util", 0) > 0 or g.get("mem", 0) > 0]
print(f"gpu_check: {len(rows)} samples, {len(gpus)} GPU readings, {len(busy)} nonzero;",
      "peak use", max((g.get("util", 0) for g in gpus), default=None), "%")
sys.exit(0 if busy else 1)
PYEOF
