"""All that talks to a cluster: the remote build runner, the jobs client, transfers, the embedded local cluster."""


def __getattr__(name: str) -> object:
    # `from rbs.client import JobExecutor`, loaded on first use so that importing any
    # client module (every CLI start) does not load cloudpickle and concurrent.futures.
    if name == "JobExecutor":
        from rbs.client.pyexec import JobExecutor

        return JobExecutor
    raise AttributeError(f"module 'rbs.client' has no attribute {name!r}")
