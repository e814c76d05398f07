"""rbs and Slurm side by side on this machine, in one run: an array, a chain, submit latency.

Three cases, each run against both, printed with the ratio and the goal (issue 12):

    an array of 1,000 `true` tasks, submit to last end     rbs at >= 5x Slurm's rate
    a 20-job afterok chain submitted from a shell loop,    rbs in <= 0.5x Slurm's time
      first submit to the last job's end
    one submit in a fresh process (`sbatch`,               rbs <= 30 ms
      `rbs job submit`: named server and embedded cluster)

Slurm is Debian's slurm-wlm: installed with apt-get where it is missing and this runs
as root (`--no-install` to never install), then configured in a temp folder as one
slurmctld and one slurmd on 127.0.0.1 with a munged of its own, 2 CPUs and 1 CPU per
job, so both run 2 jobs at once (rbs: one worker with 2 job slots). Where Slurm cannot
start, its columns say why and rbs runs alone.

Slurm is tuned as an admin tunes it for short jobs (docs/design/jobs.md, "Tuning the
Slurm side"). The one setting that matters here is an `Epilog` (`/bin/true`): with one,
slurmd reports each job's end (MESSAGE_EPILOG_COMPLETE) and slurmctld schedules at once;
without one (Debian's default) the freed CPUs are seen only by the next periodic pass,
about once a second, so an array ran at ~2.8 tasks/s and a chain took ~1 s per link.
The rest: no minimum interval between scheduling passes and no batch delay, a deep
queue, no accounting, proctrack/linuxproc and task/none (no cgroup set-up per job), the
node's address given as 127.0.0.1 (no name lookups).

    .venv/bin/python bench/vs_slurm.py [--tasks 1000] [--chain 20] [--repeat 3]
                                       [--latency-runs 20] [--no-install] [--no-slurm]

Wall times on a shared machine move with its load, which is printed with each case;
each submit's CPU time (user + system, from wait4) moves much less.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_startup import _rbs, start_cluster, stop

WAIT_S = 900.0  # the longest any one case may take before the script gives up


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process so far, every thread (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(cmd: list[str], env: dict[str, str], *, check: bool = True) -> str:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S)
    if check and r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


def timed_process(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of one fresh process, which must succeed."""
    started = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode() if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({p.returncode}): {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def poll(done: Callable[[], bool], what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen in {WAIT_S:.0f} s")
        time.sleep(every)


# ---- Slurm


def slurm_available(install: bool) -> str | None:
    """None if slurmctld, slurmd and munged are here (installing them if allowed), else why not."""
    tools = ("slurmctld", "slurmd", "sbatch", "squeue", "munged")
    if all(shutil.which(t) for t in tools):
        return None
    if not install:
        return "slurm-wlm is not installed (and --no-install was given)"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "slurm-wlm is not installed, and installing it needs root and apt-get"
    print("installing Debian's slurm-wlm and munge with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S)
    if r.returncode != 0 or not all(shutil.which(t) for t in tools):
        return f"apt-get install slurm-wlm failed: {r.stderr.strip()[-300:]}"
    return None


SLURM_CONF = """\
ClusterName=rbsbench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# slurmd reports a job's end when its epilog is done, and that report runs the scheduler
# at once; with no epilog, freed CPUs wait for the next periodic pass (~1 s).
Epilog={epilog}
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,default_queue_depth=10000
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MaxArraySize=100001
MaxJobCount=200000
MinJobAge=600
KillWait=2
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory={memory_mb} State=UNKNOWN
PartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """One slurmctld, one slurmd and a munged, all in `folder`, on 127.0.0.1."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.munged_pid: int | None = None
        self.env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}

    def start(self) -> None:
        d = self.dir
        for sub in ("munge", "state", "spool"):
            (d / sub).mkdir(mode=0o700, parents=True)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        m = d / "munge"
        munged = ["munged", "--force", f"--socket={m}/munge.socket", f"--key-file={key}"]
        munged += [f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log"]
        run([*munged, f"--seed-file={m}/munged.seed"], self.env)
        self.munged_pid = int((m / "munged.pid").read_text().split()[0])
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
        conf = SLURM_CONF.format(
            dir=d,
            ctld_port=free_port(),
            d_port=free_port(),
            memory_mb=kib * 8 // 10 // 1024,
            epilog=shutil.which("true") or "/bin/true",
        )
        (d / "slurm.conf").write_text(conf)
        with open(d / "daemons.log", "wb") as log:
            for cmd in (["slurmctld", "-D", "-i"], ["slurmd", "-D", "-N", "localhost"]):
                self.procs.append(
                    subprocess.Popen(
                        [*cmd, "-f", str(d / "slurm.conf")], env=self.env, stdout=log, stderr=log
                    )
                )

        def idle() -> bool:
            for name, p in zip(("slurmctld", "slurmd"), self.procs, strict=True):
                if p.poll() is not None:
                    tail = (d / "daemons.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"{name} exited ({p.returncode}):\n{tail}")
            r = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True
            )
            return r.stdout.strip() == "idle"

        poll(idle, "the Slurm node becoming idle", every=0.3)

    def stop(self) -> None:
        for p in reversed(self.procs):  # slurmd, then slurmctld
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.munged_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.munged_pid, signal.SIGTERM)

    def sbatch(self, *args: str) -> str:
        return run(["sbatch", "--parsable", "-o", "/dev/null", *args], self.env).split(";")[0]

    def wait(self, job: str) -> None:
        """Until no task of `job` is pending, running or completing."""

        def ended() -> bool:
            out = run(["squeue", "-h", "-r", "-j", job, "-t", "PD,R,CG,CF", "-o", "%i"], self.env)
            return out == ""

        poll(ended, f"Slurm job {job} ending", every=0.2)

    def states(self, job: str) -> dict[str, int]:
        out = run(["squeue", "-h", "-r", "-j", job, "-t", "all", "-o", "%T"], self.env)
        counts: dict[str, int] = {}
        for state in out.split():
            counts[state] = counts.get(state, 0) + 1
        return counts


# ---- the cases


def array_case(submit: Callable[[], str], wait: Callable[[str], None]) -> tuple[float, str]:
    """(seconds from the submit to the last task's end, the job id)."""
    t = time.perf_counter()
    job = submit()
    wait(job)
    return time.perf_counter() - t, job


CHAIN = """\
set -e
prev=$({submit} {first})
for i in $(seq 2 {middle}); do prev=$({submit} {dep}$prev {cmd}); done
{submit} {dep}$prev {last}
"""


def chain_case(
    script: str, env: dict[str, str], end_file: Path, wait: Callable[[str], None]
) -> tuple[float, float]:
    """Seconds from the start of the shell loop to the moment the last job wrote `end_file`,
    and to the loop's end (its submits alone: what bounds a chain of short jobs when the
    last job ends soon after)."""
    end_file.unlink(missing_ok=True)
    t = time.time()
    last = run(["bash", "-c", script], env)
    looped = time.time() - t
    wait(last)
    return float(end_file.read_text()) - t, looped


def chain_median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median chain time, and the median time of its shell loop alone."""
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def fmt_ratio(slurm: float | None, rbs: float) -> str:
    return f"{slurm / rbs:5.2f}x" if slurm else "    -"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000, help="array tasks")
    ap.add_argument("--chain", type=int, default=20, help="jobs in the afterok chain")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the chain (median)")
    ap.add_argument("--array-repeat", type=int, default=1, help="runs of the array (median)")
    ap.add_argument("--latency-runs", type=int, default=20, help="fresh submit processes")
    ap.add_argument("--no-install", action="store_true", help="never apt-get install Slurm")
    ap.add_argument("--no-slurm", action="store_true", help="run rbs alone")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rbs-vs-slurm-"))
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["RBS_HOME"] = str(tmp / "home")
    why = "--no-slurm" if args.no_slurm else slurm_available(not args.no_install)
    slurm: Slurm | None = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if why is None:
            slurm = Slurm(tmp / "slurm")
            try:
                slurm.start()
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                why = f"Slurm did not start: {e}"
                slurm.stop()
                slurm = None
        if slurm is None:
            print(f"Slurm skipped: {why}")
        else:
            print(
                f"Slurm: {run(['sbatch', '--version'], slurm.env)}, one node of 2 CPUs on "
                "127.0.0.1; Epilog=true, sched_min_interval=0, batch_sched_delay=0"
            )
        procs, address = start_cluster(tmp, env, job_slots=2)
        rbs_env = {**env, "RBS_REMOTE": address}
        rbs = _rbs()
        print(f"rbs: a server and one worker with 2 job slots at {address} ({' '.join(rbs)})")
        print(f"load average at the start: {load()}\n")
        results: list[tuple[str, float | None, float, str, str]] = []

        # 1. The array.
        def rbs_wait(job: str) -> None:
            run([*rbs, "job", "wait", job], rbs_env)

        s_arr = None
        s_states: dict[str, int] = {}
        if slurm is not None:
            s = slurm
            s_runs = []
            for _ in range(args.array_repeat):
                took, job = array_case(
                    lambda: s.sbatch(f"--array=0-{args.tasks - 1}", "--wrap", "true"), s.wait
                )
                s_runs.append(took)
                s_states = s.states(job)
            s_arr = statistics.median(s_runs)
        r_runs = []
        submit = [*rbs, "job", "submit", "--array", f"0-{args.tasks - 1}", "--", "true"]
        cpu0 = [process_cpu(p.pid) for p in procs]  # the worker daemon, the server
        for _ in range(args.array_repeat):
            # `rbs job wait` exits non-zero unless every task COMPLETED: run() checks it.
            r_runs.append(array_case(lambda: run(submit, rbs_env), rbs_wait)[0])
        r_arr = statistics.median(r_runs)
        per_task = [
            (process_cpu(p.pid) - c) / (args.tasks * args.array_repeat) * 1e3
            for p, c in zip(procs, cpu0, strict=True)
        ]
        print(
            f"rbs CPU per array task (user + system, /proc): server {per_task[1]:.2f} ms, "
            f"worker daemon {per_task[0]:.2f} ms (its run supervisor and the jobs not "
            "counted: bench/worker_cpu.py)",
            flush=True,
        )
        results.append(
            (
                f"array of {args.tasks} `true` (s)",
                s_arr,
                r_arr,
                fmt_ratio(s_arr, r_arr),
                "rbs >= 5x",
            )
        )
        print(f"array done (load {load()})", flush=True)

        # 2. The chain, from a shell loop.
        end = tmp / "chain.end"
        stamp = f"sh -c 'date +%s.%N > {end}'"
        s_chain = s_loop = None
        if slurm is not None:
            s = slurm
            script = CHAIN.format(
                submit="sbatch --parsable -o /dev/null",
                first="--wrap true",
                middle=args.chain - 1,
                dep="--dependency=afterok:",
                cmd="--wrap true",
                last=f'--wrap "date +%s.%N > {end}"',
            )
            s_chain, s_loop = chain_median(
                [chain_case(script, s.env, end, s.wait) for _ in range(args.repeat)]
            )
        script = CHAIN.format(
            submit=" ".join(rbs) + " job submit",
            first="-- true",
            middle=args.chain - 1,
            dep="--deps afterok:",
            cmd="-- true",
            last=f"-- {stamp}",
        )
        r_chain, r_loop = chain_median(
            [chain_case(script, rbs_env, end, rbs_wait) for _ in range(args.repeat)]
        )
        results.append(
            (
                f"{args.chain}-job afterok chain, shell loop (s)",
                s_chain,
                r_chain,
                fmt_ratio(s_chain, r_chain),
                "rbs >= 2x",
            )
        )
        results.append(
            (
                "  of which the shell loop of submits (s)",
                s_loop,
                r_loop,
                fmt_ratio(s_loop, r_loop),
                "",
            )
        )
        print(f"chain done (load {load()})", flush=True)

        # 3. Submit latency, each a fresh process.
        def latency(cmd: list[str], case_env: dict[str, str]) -> tuple[float, float]:
            timed_process(cmd, case_env)  # unmeasured: bytecode compiled, caches warm
            walls, cpus = zip(
                *(timed_process(cmd, case_env) for _ in range(args.latency_runs)), strict=True
            )
            return 1000 * statistics.median(walls), 1000 * statistics.median(cpus)

        py_wall, py_cpu = latency([sys.executable, "-c", "pass"], env)
        s_lat = s_cpu = None
        if slurm is not None:
            s_lat, s_cpu = latency(
                ["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true"], slurm.env
            )
        named, named_cpu = latency([*rbs, "job", "submit", "--", "true"], rbs_env)
        add = results.append
        add(
            (
                "submit, named server (ms wall)",
                s_lat,
                named,
                fmt_ratio(s_lat, named),
                "rbs <= 30 ms",
            )
        )
        add(("submit, named server (ms CPU)", s_cpu, named_cpu, fmt_ratio(s_cpu, named_cpu), ""))
        try:
            run([*rbs, "job", "submit", "--", "true"], env)  # starts the embedded cluster
        except RuntimeError as e:
            print(f"the embedded cluster did not start, so its rows are left out: {e}")
        else:
            emb, emb_cpu = latency([*rbs, "job", "submit", "--", "true"], env)
            add(
                (
                    "submit, embedded cluster (ms wall)",
                    s_lat,
                    emb,
                    fmt_ratio(s_lat, emb),
                    "rbs <= 30 ms",
                )
            )
            add(
                ("submit, embedded cluster (ms CPU)", s_cpu, emb_cpu, fmt_ratio(s_cpu, emb_cpu), "")
            )
        print(f"latency done (load {load()})\n", flush=True)

        print(f"{'case':40} {'Slurm':>9} {'rbs':>9} {'Slurm/rbs':>10}  goal")
        for label, s_val, r_val, ratio, goal in results:
            s_text = f"{s_val:9.2f}" if s_val is not None else f"{'-':>9}"
            print(f"{label:40} {s_text} {r_val:9.2f} {ratio:>10}  {goal}")
        print(
            f"\nfloor: `python -c pass` takes {py_wall:.1f} ms wall, {py_cpu:.1f} ms CPU here now; "
            f"array rate: rbs {args.tasks / r_arr:,.0f} tasks/s"
            + (f", Slurm {args.tasks / s_arr:,.0f} tasks/s" if s_arr else "")
        )
        if slurm is not None:
            print(f"Slurm's array tasks ended as: {s_states}")
        print(f"load average at the end: {load()}")
    finally:
        run([*_rbs(), "remote", "down"], env, check=False)
        stop(procs)
        if slurm is not None:
            slurm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
