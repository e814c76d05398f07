"""The runner of rbs.JobExecutor's jobs: calls a pickled function on the worker.

It is staged with each job as `_rbs/pyrun.py`, next to the caller's cloudpickle
(`_rbs/cloudpickle/`), the function (`_rbs/fn.pkl`), one file of calls per task
(`_rbs/calls/N.pkl`) and `_rbs/spec.json`, and started as `python3 _rbs/pyrun.py`:
the worker needs nothing but a python3 of the caller's major.minor version. So this
file imports only the standard library and the staged cloudpickle, never rbs.

Before anything is unpickled it compares the worker's Python and cloudpickle versions
with the caller's (spec.json); a mismatch ends the task with exit code 3 and
`_rbs_out/error.txt` naming both. Otherwise every call of the task runs in order and
`_rbs_out/result.pkl` holds one (ok, value, traceback text) triple per call; the exit
code is 1 when a call raised, else 0.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

OUT_DIR = "_rbs_out"
BUNDLE_DIR = "_rbs"
MISMATCH_EXIT = 3


def version_problem(spec: dict[str, Any], python: str, cloudpickle: str | None) -> str | None:
    """Why this interpreter cannot run the caller's pickles, or None when it can."""
    want_py, want_cp = spec["python"], spec["cloudpickle"]
    if python != want_py or cloudpickle != want_cp:
        return (
            f"rbs.JobExecutor: version mismatch: the caller runs Python {want_py} with "
            f"cloudpickle {want_cp}, the worker's {spec.get('interpreter', 'python3')} is "
            f"Python {python} with cloudpickle {cloudpickle or '(none)'}; both must match "
            "(pass python=... to the executor to name another interpreter)"
        )
    return None


def _write_error(text: str) -> None:
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "error.txt"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text, file=sys.stderr)


def _outcome(cp: Any, fn: Any, args: Any, kwargs: Any) -> tuple[bool, Any, str]:
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:
        tb = "".join(traceback.format_exception(e))
        print(tb, file=sys.stderr, end="")
        try:
            cp.dumps(e)
            return False, e, tb
        except Exception:
            return False, RuntimeError(f"{type(e).__name__}: {e}"), tb
    try:
        cp.dumps(value)
        return True, value, ""
    except Exception as e:
        tb = "".join(traceback.format_exception(e))
        return False, RuntimeError(f"the result cannot be pickled: {e}"), tb


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    sys.path.insert(0, here)  # the caller's cloudpickle
    sys.path.insert(1, os.getcwd())  # modules staged with inputs=
    try:
        import cloudpickle as cp

        cp_version: str | None = cp.__version__
    except ImportError:
        cp_version = None
    python = "{}.{}".format(*sys.version_info[:2])
    problem = version_problem(spec, python, cp_version)
    if problem:
        _write_error(problem)
        return MISMATCH_EXIT
    index = int(os.environ.get("RBS_ARRAY_INDEX") or 0)
    try:
        with open(os.path.join(here, "fn.pkl"), "rb") as f:
            fn = cp.load(f)
        with open(os.path.join(here, "calls", f"{index}.pkl"), "rb") as f:
            calls = cp.load(f)
    except Exception as e:
        _write_error(
            "rbs.JobExecutor: cannot unpickle the function or its arguments on the worker "
            "(a local module? pass by_value=[module] or inputs=[...]):\n"
            + "".join(traceback.format_exception(e))
        )
        return MISMATCH_EXIT
    outcomes = [_outcome(cp, fn, args, kwargs) for args, kwargs in calls]
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "result.pkl"), "wb") as f:
        cp.dump(outcomes, f)
    return 0 if all(ok for ok, _, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
