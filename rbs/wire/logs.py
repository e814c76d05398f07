"""Job log lines <-> the Workers stream's `LogLine` message, both ways, with one stream table."""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.model import LogLine, LogStream

_TO_PB: dict[LogStream, int] = {
    LogStream.OUT: w_pb2.LogLine.OUT,
    LogStream.ERR: w_pb2.LogLine.ERR,
    LogStream.SYS: w_pb2.LogLine.SYS,
}
_FROM_PB: dict[int, LogStream] = {v: k for k, v in _TO_PB.items()}


def line_to_pb(line: LogLine) -> w_pb2.LogLine:
    """The message for one line; its run (task, attempt, rank) goes on the LogLines batch."""
    seconds = int(line.time)
    return w_pb2.LogLine(
        seq=line.seq,
        time=timestamp_pb2.Timestamp(seconds=seconds, nanos=int((line.time - seconds) * 1e9)),
        stream=_TO_PB[line.stream],
        text=line.text,
    )


def line_from_pb(pb: w_pb2.LogLine, *, task: int | None, attempt: int, rank: int) -> LogLine:
    """The line a message carries, in the run its batch names. A stream this rbs does not
    know (a newer worker's) reads as SYS rather than losing the line."""
    return LogLine(
        seq=pb.seq,
        time=pb.time.ToNanoseconds() / 1e9,
        stream=_FROM_PB.get(pb.stream, LogStream.SYS),
        text=pb.text,
        task=task,
        attempt=attempt,
        rank=rank,
    )


# A SYS line that starts with this is a telemetry sample (JSON after it), written by the
# worker's supervisor (rbs.executor.telemetry) and stored apart by the server
# (rbs.server.telemetry); a job's own output is never SYS, so it cannot forge one.
TELEMETRY_PREFIX = "\x1etelemetry "
