"""A toy data-parallel training job: ranks meet at MASTER_ADDR:MASTER_PORT, rank 0 checkpoints.

Each rank counts the letters of its shard of the corpus (its "gradient"); rank 0 sums
them (an all-reduce over TCP), updates the model and saves ckpt/latest.json after every
step. rbs restores the checkpoint folder before a retry, so a new attempt resumes where
the last one stopped. With DEMO_CRASH_AT_STEP=N, attempt 1 crashes after step N.
"""

import argparse
import collections
import json
import os
import socket
import sys
import time

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
ATTEMPT = int(os.environ.get("RBS_ATTEMPT", "1"))


def log(text: str) -> None:
    print(f"[rank {RANK}/{WORLD} attempt {ATTEMPT}] {text}", flush=True)


class Peer:
    """One TCP connection carrying newline-delimited JSON."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(120)
        self.sock = sock
        self.file = sock.makefile("rw", encoding="utf-8")

    def send(self, obj: object) -> None:
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()

    def recv(self) -> dict:
        line = self.file.readline()
        if not line:
            raise ConnectionError("peer closed the connection")
        return json.loads(line)


def rendezvous(timeout: float = 60.0) -> list[Peer]:
    """Rank 0: accept every other rank. Others: connect to rank 0 (it may not listen yet)."""
    if WORLD == 1:
        return []
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if RANK == 0:
        server = socket.create_server(("", port))
        server.settimeout(timeout)
        peers: dict[int, Peer] = {}
        while len(peers) < WORLD - 1:
            conn, _ = server.accept()
            peer = Peer(conn)
            peers[peer.recv()["rank"]] = peer
        log(f"rendezvous at {addr}:{port} with ranks {sorted(peers)}")
        return [peers[r] for r in sorted(peers)]
    deadline = time.monotonic() + timeout
    while True:
        try:
            peer = Peer(socket.create_connection((addr, port), timeout=5))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # rank 0 is still starting; retrying is the protocol
    peer.send({"rank": RANK})
    log(f"connected to rank 0 at {addr}:{port}")
    return [peer]


def gradient(words: list[str], step: int, steps: int) -> dict[str, int]:
    batch = [w for i, w in enumerate(words) if i % steps == step]
    return dict(collections.Counter("".join(batch)))


def load_checkpoint(folder: str) -> dict:
    try:
        with open(os.path.join(folder, "latest.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"step": 0, "weights": {}}


def save_checkpoint(folder: str, state: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, "latest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(state, f, sort_keys=True)
    os.replace(tmp, os.path.join(folder, "latest.json"))


def main() -> int:
    try:
        return train()
    except (ConnectionError, TimeoutError) as e:
        if RANK == 0:
            raise
        # Rank 0 ended (or crashed): the scheduler stops this rank anyway.
        log(f"lost rank 0 ({e}); stopping")
        return 1


def train() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--ckpt", default="ckpt")
    ap.add_argument("--out", default="model.json")
    args = ap.parse_args()
    crash_at = int(os.environ.get("DEMO_CRASH_AT_STEP", "0"))
    with open(args.data) as f:
        words = f.read().split()[RANK::WORLD]
    peers = rendezvous()
    if RANK == 0:
        log(f"nodes {os.environ.get('RBS_NODELIST', 'localhost')}")
        state = load_checkpoint(args.ckpt)
        if state["step"]:
            log(f"resumed from checkpoint at step {state['step']}")
        for p in peers:
            p.send({"start": state["step"]})
        start = state["step"]
    else:
        start = peers[0].recv()["start"]
    for step in range(start, args.steps):
        grad = gradient(words, step, args.steps)
        if RANK == 0:
            total = collections.Counter(grad)
            for p in peers:
                total.update(p.recv()["grad"])
            weights = collections.Counter(state["weights"])
            weights.update(total)
            state = {"step": step + 1, "weights": dict(weights)}
            save_checkpoint(args.ckpt, state)
            for p in peers:
                p.send({"done": step + 1})
            log(f"step {step + 1}/{args.steps}: {sum(total.values())} letters, checkpoint saved")
            if ATTEMPT == 1 and step + 1 == crash_at:
                log(f"simulated crash after step {crash_at}; rbs retries from the checkpoint")
                return 3
        else:
            peers[0].send({"grad": grad})
            peers[0].recv()
            log(f"step {step + 1}/{args.steps}: sent {sum(grad.values())} letters")
    if RANK == 0:
        with open(args.out, "w") as f:
            json.dump(state["weights"], f, sort_keys=True)
        log(f"done: model.json has {len(state['weights'])} weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
