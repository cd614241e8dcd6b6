"""Crash safety: SIGKILL a writing process; everything it acknowledged is there afterwards."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from crossbeat.metadata import MetadataSettings
from crossbeat.metadata.sqlite import SqliteMetadataStore

CHILD = textwrap.dedent(
    """
    import sys, threading
    from crossbeat.metadata import Bucket, MetadataSettings, new_version_id
    from crossbeat.metadata.sqlite import SqliteMetadataStore

    store = SqliteMetadataStore(sys.argv[1], MetadataSettings())
    store.create_bucket(Bucket("b", "o", "l", "2024-01-01T00:00:00.000Z"))
    lock = threading.Lock()

    def work(i):
        n = 0
        while True:
            vid = new_version_id()
            store.put_version({"bucket": "b", "key": f"k{i}/{n % 7}", "versionId": vid,
                               "sortKey": vid, "size": n})
            with lock:  # one write per line: the parent never sees half a line
                sys.stdout.write(vid + "\\n")
                sys.stdout.flush()
            n += 1

    for i in range(8):
        threading.Thread(target=work, args=(i,), daemon=True).start()
    threading.Event().wait()
    """
)


@pytest.mark.timeout(120)
def test_acknowledged_puts_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "crash.sqlite3"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout or []:
            lines.put(line)

    reader = threading.Thread(target=pump)
    reader.start()
    acknowledged: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(acknowledged) < 300:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "child made too little progress"
            try:
                acknowledged.append(lines.get(timeout=1))
            except queue.Empty:
                continue
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    while not lines.empty():  # lines written before the kill are acknowledged too
        acknowledged.append(lines.get())
    complete = [line.strip() for line in acknowledged if line.endswith("\n")]

    with SqliteMetadataStore(db, MetadataSettings()) as store:
        stored = {m["versionId"] for m in store.list_versions("b", limit=1_000_000)}
        missing = set(complete) - stored
        assert not missing, f"{len(missing)} acknowledged versions lost"
        entries = store.read_journal(0, 1_000_000)
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert store.last_seq() == len(entries)
        journaled = {e.versionId for e in entries if e.op == "put" and e.key}
        assert journaled == stored  # one entry per stored version, none for lost ones
        assert len(entries) == 1 + len(stored)
