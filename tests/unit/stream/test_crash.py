"""Crash durability: SIGKILL a writer; every acknowledged batch is there exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossbeat.stream import StreamStore
from tests.unit.stream.conftest import all_values
from tests.unit.stream.crash_writer import SETTINGS, STREAMS

WRITER = Path(__file__).with_name("crash_writer.py")
REPO = Path(__file__).resolve().parents[3]


def _run_and_kill(data_dir: Path, run: str, min_acks: int) -> list[tuple[str, str, int, int, int]]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), run],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    acks: list[tuple[str, str, int, int, int]] = []
    deadline = time.monotonic() + 60
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.split()
            if parts and parts[0] == "ack":
                acks.append((run, parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
            if len(acks) >= min_acks or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)
        # Acks already written to the pipe before the kill count too.
        rest, _ = proc.communicate(timeout=10)
        for line in rest.splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0] == "ack":
                acks.append((run, parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert len(acks) >= min_acks, (len(acks), proc.stderr.read() if proc.stderr else "")
    return acks


@pytest.mark.timeout(120)
def test_sigkill_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    acks = _run_and_kill(tmp_path, "r1", 400)
    acks += _run_and_kill(tmp_path, "r2", 200)  # a second run on the recovered store, killed again

    async def check() -> None:
        store = await StreamStore.open(tmp_path, SETTINGS)
        for name in STREAMS:
            stream = store.get_stream(name)
            assert stream is not None
            records = all_values(stream.read(0, 10**9))
            offsets = [o for o, _ in records]
            assert offsets == list(range(stream.end_offset))  # dense, in order, no duplicates
            values = {v: o for o, v in records}
            assert len(values) == len(records)
            mine = [a for a in acks if a[1] == name]
            for run, _s, writer, seq, base in mine:
                value = f"{run}:{name}:{writer}:{seq}".encode() * 3
                assert values.get(value) == base, (writer, seq, base)
                assert values.get(value + b"+") == base + 1
            # Within each writer, acknowledged batches are in order.
            for key in {(a[0], a[2]) for a in mine}:
                bases = [a[4] for a in mine if (a[0], a[2]) == key]
                assert bases == sorted(bases)
        await store.close()

    asyncio.run(check())
