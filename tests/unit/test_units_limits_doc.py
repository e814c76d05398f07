"""README's "What a job may ask for" table says what rbs.units.LIMITS holds."""

from __future__ import annotations

from pathlib import Path

from rbs.units import LIMITS

README = Path(__file__).resolve().parents[2] / "README.md"

# README row (its first cell) -> the LIMITS entries whose `low to high` it shows.
RANGES = {
    "priority": ["priority"],
    "max_retries": ["max_retries"],
    "restarts": ["restarts"],
    "time_limit": ["time_limit"],
    "nodes, min_nodes, max_nodes": ["nodes"],
    "resources.cpu": ["resources.cpu"],
    "resources.gpus": ["resources.gpus"],
}
# Rows that show only the largest value (in their own words).
HIGHS = {
    "resources.memory": ["resources.memory"],
    "array.size / array.index": ["array.size", "array.index"],
    "dependencies": ["dependencies"],
    "command.args / command.size": ["command.args"],
    "outputs": ["outputs"],
    "name / queue / path": ["name", "queue", "path"],
}


def rows() -> dict[str, str]:
    text = README.read_text()
    table = text[text.index("**What a job may ask for.**") :]
    out = {}
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| Field"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0]] = cells[-1]
        elif out and not line.startswith("|"):
            break
    return out


def test_the_readme_table_shows_every_range() -> None:
    table = rows()
    for row, keys in RANGES.items():
        for key in keys:
            limit = LIMITS[key]
            assert f"{limit.show(limit.low)} to {limit.show(limit.high)}" in table[row], row
    for row, keys in HIGHS.items():
        match = next(r for r in table if r.startswith(row))
        for key in keys:
            assert LIMITS[key].show(LIMITS[key].high) in table[match], (row, key)
    env = next(v for r, v in table.items() if r.startswith("env."))
    assert "64 KiB" in env and LIMITS["env.size"].high == 64 * 1024
    assert str(LIMITS["env.count"].high) in env


def test_every_limit_has_a_row() -> None:
    named = " ".join(rows())
    for key in LIMITS:
        assert key.split(".")[0] in named, key
