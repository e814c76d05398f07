"""Test harness: an in-process `rbs remote serve` on 127.0.0.1:0, on its own loop in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from rbs.server.cluster import RunningCluster, start_cluster
from rbs.server.config import CasConfig, Config, ServerConfig


class ServerThread:
    """Starts the server and blocks until it accepts calls (no sleeps); stops it on request."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.running: RunningCluster | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="rbs-test-server", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())
        self.loop.close()

    async def _main(self) -> None:
        try:
            # The REAPI tests need no job scheduler: no job driver, no jobs API.
            self.running = await start_cluster(self.config, jobs=False)
        except BaseException as e:
            self._error = e
            self._ready.set()
            return
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await self.running.stop(grace=2.0)

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise TimeoutError("test server did not start within 30 s")
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        assert self.running is not None
        return self.running.port

    @property
    def target(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "test server did not stop within 30 s"


def make_config(data_dir: Path, **server: object) -> Config:
    cas = {k: server.pop(k) for k in ("max_batch_size", "max_size", "lease") if k in server}
    return Config(
        server=ServerConfig(host="127.0.0.1", port=0, data_dir=data_dir, **server),  # type: ignore[arg-type]
        cas=CasConfig(**cas),  # type: ignore[arg-type]
    )


StartServer = Callable[..., ServerThread]
