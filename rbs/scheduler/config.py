"""Queue and scheduler settings as frozen dataclasses, with a loader from parsed TOML tables."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rbs import units
from rbs.units import SpecError
from rbs.wire import specs

PREEMPT_MODES = ("requeue", "cancel")
QUEUE_KEYS = ("name", "priority_weight", "default_time", "max_time", "preempts", "preempt_mode")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """A queue (Slurm partition): its priority weight and time limits in seconds."""

    name: str
    priority_weight: int = 0
    default_time_limit: int | None = None
    max_time_limit: int | None = None
    # The queues whose preemptible jobs this queue's jobs may preempt (of a lower tier),
    # and what becomes of this queue's own victims: "requeue" (PENDING, attempt + 1)
    # or "cancel" (they end PREEMPTED).
    preempts: tuple[str, ...] = ()
    preempt_mode: str = "requeue"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a queue needs a name")
        if self.preempt_mode not in PREEMPT_MODES:
            raise ValueError(
                f"queue {self.name}: preempt_mode {self.preempt_mode!r}: want "
                + " or ".join(repr(m) for m in PREEMPT_MODES)
            )
        if (
            self.default_time_limit is not None
            and self.max_time_limit is not None
            and self.default_time_limit > self.max_time_limit
        ):
            raise ValueError(
                f"queue {self.name}: default time limit {self.default_time_limit}s is above "
                f"its max {self.max_time_limit}s"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """Everything the scheduler core is told instead of reading a clock or a file."""

    queues: tuple[QueueConfig, ...] = (QueueConfig(name="batch"),)
    # A worker silent for this long is lost: its tasks are requeued (or NODE_FAIL).
    # Slurm's SlurmdTimeout: running jobs ride out a server outage or a network cut
    # of up to the lease it gives (docs/design/runs.md); tests set seconds.
    heartbeat_timeout: float = 300.0
    # One priority point per interval pending, up to the cap: nothing waits forever
    # behind a stream of equal-priority newcomers, yet --priority still dominates.
    age_interval: float = 60.0
    age_max: int = 1440
    max_array_size: int = 1_000_000
    # How many blocked jobs per pass hold workers against skip-ahead ("reservation"
    # names maintenance windows only: rbs.scheduler.windows).
    hold_depth: int = 4
    # How many jobs of distinct task shapes a pass may find unable to start before it
    # stops (Slurm's default_queue_depth): what bounds a pass over a deep queue of many
    # shapes. Jobs of a shape already seen failing in the pass cost nothing.
    pass_depth: int = 100
    # Run every pass's invariant checks (tests, simulations); costs O(state) per step.
    validate: bool = False
    # False (the default): journal commits are WAL writes without an fsync each, which
    # survive a crash or kill -9 of the server (what is acknowledged is in the OS's
    # hands) and let one-at-a-time submissions run at thousands per second. True: each
    # commit also waits for an fsync, so acknowledged work survives a power loss too.
    durable: bool = False
    default_master_ports: tuple[int, int] = (29500, 29999)
    # How many jobs the runs of one job may submit with their scoped tokens, in all.
    max_child_jobs: int = 100
    queue_names: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        names = tuple(q.name for q in self.queues)
        if len(set(names)) != len(names):
            raise ValueError(f"queue names repeat: {', '.join(names)}")
        if "batch" not in names:
            # `batch` exists by default, as the job-submit default queue.
            object.__setattr__(self, "queues", (QueueConfig(name="batch"), *self.queues))
            names = ("batch", *names)
        object.__setattr__(self, "queue_names", names)
        if self.heartbeat_timeout <= 0 or self.age_interval <= 0:
            raise ValueError("heartbeat_timeout and age_interval must be positive")
        if self.pass_depth < 1:
            raise ValueError(f"pass_depth {self.pass_depth} must be at least 1")
        for q in self.queues:
            for other in q.preempts:
                if other not in names:
                    raise ValueError(
                        f"queue {q.name}: preempts unknown queue {other!r}; queues: "
                        + ", ".join(names)
                    )

    def queue(self, name: str) -> QueueConfig | None:
        for q in self.queues:
            if q.name == name:
                return q
        return None


def load_scheduler_config(
    table: Mapping[str, Any], base: SchedulerConfig | None = None
) -> SchedulerConfig:
    """Settings from a parsed TOML table: `[[queues]]` entries and scalar overrides.

    Example: `queues = [{name = "gpu", priority_weight = 100, default_time = "1h",
    max_time = "1d"}]`, `heartbeat_timeout = 300`.
    """
    base = base or SchedulerConfig()
    queues: list[QueueConfig] = []
    for i, q in enumerate(table.get("queues", [])):
        where = f"queues[{i}]"
        if not isinstance(q, Mapping) or not isinstance(q.get("name"), str):
            raise SpecError(where, q, "needs a name", '{name = "gpu", priority_weight = 10}')
        unknown = set(q) - set(QUEUE_KEYS)
        if unknown:
            raise SpecError(where, sorted(unknown)[0], "unknown key", ", ".join(QUEUE_KEYS))
        preempts = q.get("preempts", [])
        if not isinstance(preempts, list) or not all(isinstance(n, str) for n in preempts):
            raise SpecError(f"{where}.preempts", preempts, "not a list of names", '["low"]')
        mode = q.get("preempt_mode", "requeue")
        if mode not in PREEMPT_MODES:
            raise SpecError(f"{where}.preempt_mode", mode, "unknown mode", '"requeue" or "cancel"')
        queues.append(
            QueueConfig(
                name=q["name"],
                priority_weight=specs.parse_count(
                    q.get("priority_weight", 0), f"{where}.priority_weight", -(2**31)
                ),
                default_time_limit=units.parse_duration(q["default_time"], f"{where}.default_time")
                if "default_time" in q
                else None,
                max_time_limit=units.parse_duration(q["max_time"], f"{where}.max_time")
                if "max_time" in q
                else None,
                preempts=tuple(preempts),
                preempt_mode=mode,
            )
        )
    known = {"queues", "heartbeat_timeout", "age_interval", "durable"}
    known |= {"age_max", "max_array_size", "hold_depth", "max_child_jobs", "pass_depth"}
    if "reservation_depth" in table:
        # The old name of hold_depth, still read: a config that worked keeps working.
        logging.getLogger(__name__).warning(
            "[jobs] reservation_depth is now called hold_depth; rename it (read as hold_depth)"
        )
        table = {**table, "hold_depth": table["reservation_depth"]}
        table.pop("reservation_depth")
    extra = sorted(set(table) - known)
    if extra:
        # A typo must not silently fall back to a default.
        raise SpecError("key", extra[0], "unknown", ", ".join(sorted(known)))
    kw: dict[str, Any] = {}
    if "durable" in table:
        if not isinstance(table["durable"], bool):
            raise SpecError("durable", table["durable"], "not a boolean", "true or false")
        kw["durable"] = table["durable"]
    for key in ("heartbeat_timeout", "age_interval"):
        if key in table:
            kw[key] = float(table[key])
    for key in ("age_max", "max_array_size", "hold_depth", "max_child_jobs", "pass_depth"):
        if key in table:
            kw[key] = specs.parse_count(table[key], key)
    return SchedulerConfig(
        queues=tuple(queues) or base.queues,
        heartbeat_timeout=kw.get("heartbeat_timeout", base.heartbeat_timeout),
        age_interval=kw.get("age_interval", base.age_interval),
        age_max=kw.get("age_max", base.age_max),
        max_array_size=kw.get("max_array_size", base.max_array_size),
        hold_depth=kw.get("hold_depth", base.hold_depth),
        pass_depth=kw.get("pass_depth", base.pass_depth),
        max_child_jobs=kw.get("max_child_jobs", base.max_child_jobs),
        validate=base.validate,
        durable=kw.get("durable", base.durable),
    )
