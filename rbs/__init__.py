"""rbs: one tool for builds and cluster jobs.

`rbs.JobExecutor` (a `concurrent.futures.Executor` that runs Python calls as cluster
jobs) is imported on first use, so `import rbs` costs nothing; the names offered this
way are `ROOT_EXPORTS` in scripts/check_layout.py.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    if name == "JobExecutor":
        from rbs.client.pyexec import JobExecutor

        return JobExecutor
    raise AttributeError(f"module 'rbs' has no attribute {name!r}")
