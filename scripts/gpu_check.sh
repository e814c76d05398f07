#!/usr/bin/env bash
# GPU check for rbs on a machine with NVIDIA GPUs and no network: the worker finds the
# GPUs with nvidia-smi, a `--gpus 1` job gets CUDA_VISIBLE_DEVICES pinned and torch
# sees exactly that card, a second GPU job waits (PENDING Resources) until the card is
# free, and a request larger than any worker is refused at submit. Then telemetry: a job
# that burns its GPU (torch if the job's python has it, else an nvidia-smi loop) for
# 15 s, sampled every second; `rbs job telemetry --json` must show a GPU with nonzero
# use or memory (NVML through nvidia-ml-py: put its wheel in $WHEELS too).
#
# Wheels for that machine's Python go in $WHEELS (default .gpucheck/wheels), e.g.:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 --implementation cp -d .gpucheck/wheels \
#     grpcio==1.85.3 protobuf==7.36.2 googleapis-common-protos blake3 zstandard click rich \
#     aiohttp multidict yarl propcache frozenlist aiosignal aiohappyeyeballs attrs idna \
#     markdown-it-py mdurl Pygments typing_extensions nvidia-ml-py
# Run from the repository root with OUT set to a folder for the logs.
set -u
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.gpucheck/wheels}
export PYTHONPATH=$PWD
python3 --version; nvidia-smi -L
python3 -m venv --system-site-packages /tmp/v >/dev/null
/tmp/v/bin/pip install -q --no-index --find-links "$WHEELS" grpcio==1.85.3 protobuf==7.36.2 googleapis-common-protos blake3 zstandard click rich aiohttp 2>&1 | tail -2
/tmp/v/bin/pip install -q --no-index --find-links "$WHEELS" nvidia-ml-py 2>&1 | tail -1
PY=/tmp/v/bin/python
R="$PY -m rbs"
$PY -c "import rbs.server.cluster, rbs.executor.worker; print('imports ok')"
$R remote serve --port 0 --data-dir /tmp/srv --ready-file /tmp/srv.ready > $OUT/server.log 2>&1 &
for i in $(seq 200); do [ -f /tmp/srv.ready ] && break; sleep 0.1; done
PORT=$($PY -c "import json;print(json.load(open('/tmp/srv.ready'))['port'])")
export RBS_REMOTE=127.0.0.1:$PORT
$R remote worker --server $RBS_REMOTE --work-dir /tmp/wk --telemetry-interval 1 --ready-file /tmp/wk.ready > $OUT/worker.log 2>&1 &
for i in $(seq 300); do [ -f /tmp/wk.ready ] && break; sleep 0.1; done
echo "== rbs remote status"; $R remote status
$R remote status --json > $OUT/status.json
echo "== a GPU job"
J1=$($R job submit --name gpu1 --gpus 1 --time 5m -- sh -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; nvidia-smi -L; python3 -c "import torch; print(\"torch sees\", torch.cuda.device_count(), torch.cuda.get_device_name(0)); x=torch.randn(4096,4096,device=\"cuda\"); print(\"matmul ok\", float((x@x).sum())!=0)"')
echo "job $J1"
echo "== a second GPU job while the first holds the only card: it must wait"
J2=$($R job submit --name gpu2 --gpus 1 --time 5m -- sh -c 'echo second CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES')
$R job show $J2 --json | $PY -c "import json,sys; d=json.load(sys.stdin); print('job2 while job1 runs:', d['state'], d['reason'])"
echo "== a job asking for more GPUs than any worker has"
$R job submit --gpus 2 -- true; echo "rc=$?"
$R job wait $J1 $J2 --timeout 240
echo "== logs $J1"; $R job logs $J1
echo "== logs $J2"; $R job logs $J2
$R job show $J1 --json > $OUT/job1.json
$R job show $J2 --json > $OUT/job2.json
$PY - <<'PYEOF'
import json, os
a = json.load(open(os.environ["OUT"] + "/job1.json")); b = json.load(open(os.environ["OUT"] + "/job2.json"))
print("job1", a["state"], a["start_time"], a["end_time"], a["runs"])
print("job2", b["state"], b["start_time"], b["end_time"])
print("job2 started after job1 ended:", b["start_time"] >= a["end_time"])
PYEOF
echo "== telemetry of a job that burns its GPU"
J3=$($R job submit --name gpuburn --gpus 1 --time 5m -- python3 -c '
import subprocess, time
end = time.time() + 15
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
')
$R job wait $J3 --timeout 240
$R job logs $J3 | tail -n 3
$R job telemetry $J3 --json > $OUT/telemetry.jsonl
$R job show $J3 | grep Telemetry
$PY - <<'PYEOF'
import json, os
rows = [json.loads(line) for line in open(os.environ["OUT"] + "/telemetry.jsonl") if line.strip()]
gpus = [g for r in rows for g in r.get("gpus", [])]
busy = [g for g in gpus if g.get("util", 0) > 0 or g.get("mem", 0) > 0]
print(f"telemetry: {len(rows)} samples, {len(gpus)} GPU readings, {len(busy)} nonzero, peak use",
      max((g.get("util", 0) for g in gpus), default=None), "%")
print("GPU telemetry nonzero:", bool(busy))
PYEOF
cp /tmp/wk/*.log $OUT/ 2>/dev/null
kill %1 %2 2>/dev/null
wait
