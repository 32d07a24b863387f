"""SIGTERM and Ctrl-C end a command and every process it started (issue 36).

`watch` and `history` run their lane in a child (`dflash-matrix run` in a release env); killed by CI,
they once left it running, reparented to init, writing reports for minutes. Here the release env is a
fake whose python is a shell script that starts a grandchild and waits: the signal must end both, the
command must say so in one line and exit 128 + the signal, and leave no lock and no temporary file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """[matrix]
name = "m"
lane = "selection"
expectations = "expectations/m.toml"

[axes]
capability = ["9.0"]
backend = ["FLASH_ATTN"]
causal = [true]
sink = [false]
"""
EXPECTATIONS = """[expectations]
releases = ["0.33.0"]
default = "pass"
reason = "served"
"""
# The lane child: records its pid and its grandchild's, then waits (a lane that runs for minutes).
LANE = """#!/bin/sh
echo $$ > "$FAKE_LANE_PIDS/child"
sleep 300 &
echo $! > "$FAKE_LANE_PIDS/grandchild"
wait
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's reaping is left


def _wait_for(path: Path, seconds: float = 20.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


COMMANDS = {
    "history": ["history", "m.toml", "--releases", "0.34.0", "--reuse-env", "0.34.0=env", "--out", "out"],
    "watch": ["watch", "m.toml", "--release", "0.34.0", "--reuse-env", "0.34.0=env", "--out", "out"],
}


@pytest.mark.parametrize(
    ("command", "sent", "status", "word"),
    [
        ("history", signal.SIGTERM, 143, "terminated"),
        ("history", signal.SIGINT, 130, "interrupted"),
        ("watch", signal.SIGTERM, 143, "terminated"),
        ("watch", signal.SIGINT, 130, "interrupted"),
    ],
)
def test_a_signal_ends_the_lane_child_and_its_processes_in_one_line(
    tmp_path: Path, command: str, sent: signal.Signals, status: int, word: str
) -> None:
    (tmp_path / "expectations").mkdir()
    (tmp_path / "m.toml").write_text(MATRIX)
    (tmp_path / "expectations" / "m.toml").write_text(EXPECTATIONS)
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(LANE)
    python.chmod(0o755)
    pids = tmp_path / "pids"
    pids.mkdir()
    environment = {**os.environ, "FAKE_LANE_PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "harness.cli", *COMMANDS[command], "--cache", "cache"]
    process = subprocess.Popen(argv, cwd=tmp_path, env=environment, stderr=subprocess.PIPE, text=True)
    try:
        child, grandchild = _wait_for(pids / "child"), _wait_for(pids / "grandchild")
        process.send_signal(sent)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == status, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and word in lines[-1] and len(lines[-1].splitlines()) == 1
    deadline = time.monotonic() + 10
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(grandchild)
    left = sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert not [name for name in left if name.endswith(".tmp") or name.endswith(".lock")], left
    assert "history.md" not in left and "watch.md" not in left  # nothing of the run's own reports
