"""An interactive run's input on the worker: held, in order and bounded, until its start."""

from __future__ import annotations

from rbs.executor.run_input import MAX_HELD, MAX_HELD_BYTES, InputGate
from rbs.executor.supervisor_proto import Input, SignalRun


def test_input_before_the_start_is_held_in_order_then_sent_and_later_input_at_once() -> None:
    gate, sent = InputGate(), []
    gate.offer(Input(lease_id="1.0.0", winsize=(30, 100)), sent.append)
    gate.offer(Input(lease_id="1.0.0", data="bHMK"), sent.append)
    gate.offer(SignalRun(lease_id="1.0.0", signal=2), sent.append)
    assert sent == []
    gate.start(sent.append)
    assert sent == [
        Input(lease_id="1.0.0", winsize=(30, 100)),
        Input(lease_id="1.0.0", data="bHMK"),
        SignalRun(lease_id="1.0.0", signal=2),
    ]
    gate.offer(Input(lease_id="1.0.0", eof=True), sent.append)
    assert sent[-1] == Input(lease_id="1.0.0", eof=True) and gate.held == []


def test_what_is_held_is_bounded_in_requests_and_bytes() -> None:
    gate, sent = InputGate(), []
    for _ in range(MAX_HELD + 5):
        gate.offer(SignalRun(lease_id="1.0.0", signal=2), sent.append)
    assert len(gate.held) == MAX_HELD
    gate = InputGate()
    big = "A" * (MAX_HELD_BYTES // 2 + 1)
    for _ in range(3):
        gate.offer(Input(lease_id="1.0.0", data=big), sent.append)
    gate.offer(Input(lease_id="1.0.0", winsize=(10, 10)), sent.append)  # no data: it fits
    gate.start(sent.append)
    assert [len(m.data) for m in sent if isinstance(m, Input)] == [len(big), 0]
