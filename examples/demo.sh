#!/usr/bin/env bash
# `make demo`: build the example job targets and run them on the embedded local cluster.
#
# The local cluster (server + one worker) starts on first use under $RBS_HOME (here
# .rbs/demo in the repository unless RBS_HOME is set) and stays up afterwards. The
# two-node training job needs two workers, so the demo adds a second local worker. It
# stays up with the cluster (a worker the scheduler still counts must not vanish under
# the next job) and exits by itself 10 s after `rbs remote down` stops the server.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
venv="${RBS_DEMO_VENV:-$repo/.venv}" # the tests run a copy of examples/ with the repo's venv
rbs="$venv/bin/rbs"
export RBS_HOME="${RBS_HOME:-$repo/.rbs/demo}"
unset RBS_REMOTE # the demo uses the embedded local cluster
out="$RBS_HOME/demo-outputs"

# Worker bookkeeping lines left out of the logs shown here (`rbs job logs ID` has them).
quiet='^\[rbs\] \(cgroup\|limits\|started pid\|outputs: stored 0\|declared output\|checkpoint: ckpt/ does not\)'

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cd "$here/WORKSPACE"
rm -rf "$out"

step "rbs build //train:all    (a job target's build writes rbs-out/train/<name>.job.json)"
"$rbs" build //train:all
echo "rbs-out/train/count_words.job.json:"
cat rbs-out/train/count_words.job.json
echo

step "rbs job submit //train:count_words --wait    (a batch_job: one node)"
id=$("$rbs" job submit //train:count_words --wait)
"$rbs" job logs "$id" | grep -v "$quiet"
"$rbs" job outputs "$id" --dest "$out/count_words" >/dev/null
echo "outputs: $out/count_words/counts.txt"
head -n 3 "$out/count_words/counts.txt"

step "a second local worker for the 2-node gang (the embedded cluster has one)"
port=$("$venv/bin/python" -c \
    'import json, os; print(json.load(open(os.environ["RBS_HOME"] + "/local/cluster.json"))["grpc_port"])')
state="$RBS_HOME/worker2.state" # "PID PORT" of the second worker an earlier demo started
read -r worker2_pid worker2_port 2>/dev/null <"$state" || true
if [[ -n "${worker2_pid:-}" ]] && kill -0 "$worker2_pid" 2>/dev/null \
    && [[ "$worker2_port" == "$port" ]]; then
    echo "worker 2 is up (pid $worker2_pid)"
else
    if [[ -n "${worker2_pid:-}" ]] && kill -0 "$worker2_pid" 2>/dev/null; then
        kill "$worker2_pid" # ours, serving a cluster that is gone
    fi
    rm -f "$RBS_HOME/worker2.ready"
    setsid "$rbs" remote worker --server "127.0.0.1:$port" --work-dir "$RBS_HOME/worker2" \
        --cpus 1 --job-slots 1 --build-slots 0 --name demo-worker2 --reconnect-timeout 10 \
        --ready-file "$RBS_HOME/worker2.ready" >"$RBS_HOME/worker2.log" 2>&1 </dev/null &
    worker2_pid=$!
    echo "$worker2_pid $port" >"$state"
    for _ in $(seq 300); do
        [[ -s "$RBS_HOME/worker2.ready" ]] && break
        kill -0 "$worker2_pid" 2>/dev/null || { cat "$RBS_HOME/worker2.log"; exit 1; }
        sleep 0.1
    done
    [[ -s "$RBS_HOME/worker2.ready" ]] || { echo "worker 2 did not register; see $RBS_HOME/worker2.log"; exit 1; }
    echo "worker 2 registered (pid $worker2_pid)"
fi

step "rbs job submit //train:train_2node --wait    (2 nodes; attempt 1 crashes, attempt 2 resumes)"
id=$("$rbs" job submit //train:train_2node --wait)
"$rbs" job logs "$id" | grep -v "$quiet"
"$rbs" job show "$id"
"$rbs" job outputs "$id" --dest "$out/train_2node" >/dev/null
echo "outputs: $out/train_2node/model.json"

step "done"
echo "The local cluster (server, worker, and the demo's worker 2, pid $worker2_pid) is still"
echo "running under $RBS_HOME; explore it with"
echo "  RBS_HOME=$RBS_HOME $rbs job list --history"
echo "and stop it with (worker 2 then exits by itself within 10 s)"
echo "  RBS_HOME=$RBS_HOME $rbs remote down"
http=$("$venv/bin/python" -c \
    'import json, os; print(json.load(open(os.environ["RBS_HOME"] + "/local/cluster.json"))["http_port"])')
echo "Watch the demo's jobs in the dashboard (no login from this host): http://127.0.0.1:$http/"
