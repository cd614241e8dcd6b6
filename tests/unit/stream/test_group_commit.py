"""Group commit: many concurrent durable appends share few fsyncs."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from crossbeat.stream import StreamSettings, StreamStore
from tests.unit.stream.conftest import all_values, make_batch


class SyncCounter:
    """Counts real fsync/fdatasync calls (they still happen)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)

            def counted(fd: int, _real=real) -> None:
                with self._lock:
                    self.calls += 1
                _real(fd)

            monkeypatch.setattr(os, name, counted)


@pytest.mark.parametrize("delay_ms", [0.0, 2.0])
def test_concurrent_durable_appends_share_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay_ms: float
) -> None:
    async def main() -> None:
        store = await StreamStore.open(tmp_path, StreamSettings(flush_max_delay_ms=delay_ms))
        streams = [store.create_stream(f"t-{p}") for p in range(4)]
        counter = SyncCounter(monkeypatch)
        per_stream = 100

        async def appender(k: int) -> list[int]:
            stream = streams[k % 4]
            return [
                await stream.append(make_batch([f"{k}-{i}".encode()]))
                for i in range(per_stream // 5)
            ]

        results = await asyncio.gather(*(appender(k) for k in range(20)))
        appends = sum(len(r) for r in results)
        assert appends == 400
        # Each round fsyncs each of the 4 dirty files once; 20 appenders share each round.
        assert counter.calls <= appends / 4, counter.calls
        assert store.fsync_count <= counter.calls
        for stream in streams:
            assert stream.end_offset == per_stream
            assert [o for o, _ in all_values(stream.read(0, 10**9))] == list(range(per_stream))
        await store.close()

    asyncio.run(main())


def test_durable_append_returns_only_after_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledgement follows an fdatasync of the segment that holds the batch."""

    async def main() -> None:
        store = await StreamStore.open(tmp_path, StreamSettings(flush_max_delay_ms=0.0))
        stream = store.create_stream("s")
        synced_sizes: list[int] = []
        real = os.fdatasync

        def recording(fd: int) -> None:
            real(fd)
            synced_sizes.append(os.fstat(fd).st_size)

        monkeypatch.setattr(os, "fdatasync", recording)
        batch = make_batch([b"payload"])
        await stream.append(batch)
        assert synced_sizes and synced_sizes[-1] >= len(batch)
        await stream.append(make_batch([b"payload2"]))
        assert synced_sizes[-1] >= 2 * len(batch)
        await store.close()

    asyncio.run(main())
