"""Benchmark: stream store appends/s, sequential vs many concurrent appenders (group commit).

Every durable append returns only after its bytes are fdatasync'ed. One sequential appender
pays a whole fsync per append; concurrent appenders (over several streams) share each
group-commit round, where every dirty segment is fsynced once. Also measures non-durable
appends (acks=0 path) and the read path (MB/s through `Stream.read`).

    .venv/bin/python benchmarks/stream_append.py [--seconds S] [--dir DIR] [--record-bytes N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.stream import Stream, StreamSettings, StreamStore


def make_batch(records: int, record_bytes: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    value = b"v" * record_bytes
    now = int(time.time() * 1000)
    for i in range(records):
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(builder.build())


async def run_appenders(
    streams: list[Stream], appenders: int, seconds: float, batch: bytes, durable: bool
) -> int:
    stop = time.monotonic() + seconds
    counts = [0] * appenders

    async def appender(i: int) -> None:
        stream = streams[i % len(streams)]
        while time.monotonic() < stop:
            await stream.append(bytearray(batch), durable=durable)
            counts[i] += 1

    await asyncio.gather(*(appender(i) for i in range(appenders)))
    return sum(counts)


async def scenario(
    root: Path,
    name: str,
    *,
    streams: int,
    appenders: int,
    seconds: float,
    batch: bytes,
    durable: bool,
    delay_ms: float,
) -> None:
    data_dir = root / name
    store = await StreamStore.open(data_dir, StreamSettings(flush_max_delay_ms=delay_ms))
    targets = [store.create_stream(f"bench-{p}") for p in range(streams)]
    t0 = time.perf_counter()
    count = await run_appenders(targets, appenders, seconds, batch, durable)
    if not durable:  # wait until everything written is durable too
        for s in targets:
            await s.wait_for(s.log_end_offset - 1, 30.0)
    elapsed = time.perf_counter() - t0
    fsyncs, rounds = store.fsync_count, store.flush_rounds
    mb = count * len(batch) / elapsed / 1e6
    print(
        f"{name:<34} appends/s={count / elapsed:10.0f}  MB/s={mb:7.1f}  "
        f"appends={count:7d} fsyncs={fsyncs:6d} rounds={rounds:6d} "
        f"appends/fsync={count / max(fsyncs, 1):6.1f}",
        flush=True,
    )
    await store.close()


async def read_scenario(root: Path, seconds: float, batch: bytes) -> None:
    store = await StreamStore.open(root / "read", StreamSettings(flush_max_delay_ms=0.0))
    stream = store.create_stream("read-0")
    target = 64 * 1024 * 1024
    while stream.end_offset * len(batch) < target:
        await run_appenders([stream], 16, 0.2, batch, durable=False)
        await stream.wait_for(stream.log_end_offset - 1, 30.0)
    total = 0
    fetches = 0
    stop = time.monotonic() + seconds
    t0 = time.perf_counter()
    while time.monotonic() < stop:
        offset = stream.start_offset
        while offset < stream.end_offset:
            chunks = stream.read(offset, 1 << 20)
            fetches += 1
            total += sum(len(c) for c in chunks)
            last = chunks[-1]
            # Next offset = last batch's base + lastOffsetDelta + 1.
            offset = int.from_bytes(last[0:8], "big") + int.from_bytes(last[23:27], "big") + 1
    elapsed = time.perf_counter() - t0
    print(
        f"{'read (1 MiB fetches, page cache)':<34} MB/s={total / elapsed / 1e6:8.0f}  "
        f"fetches/s={fetches / elapsed:8.0f}",
        flush=True,
    )
    await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--record-bytes", type=int, default=256)
    parser.add_argument("--records-per-batch", type=int, default=10)
    args = parser.parse_args()
    batch = make_batch(args.records_per_batch, args.record_bytes)
    print(
        f"batch: {args.records_per_batch} records x {args.record_bytes} B = {len(batch)} B; "
        f"{args.seconds:.1f} s per scenario; every durable append is fdatasync'ed"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        s = args.seconds
        await scenario(
            root,
            "sequential durable (1 appender)",
            streams=1,
            appenders=1,
            seconds=s,
            batch=batch,
            durable=True,
            delay_ms=0.0,
        )
        for delay in (0.0, 2.0):
            await scenario(
                root,
                f"64 appenders/8 streams delay={delay:g}ms",
                streams=8,
                appenders=64,
                seconds=s,
                batch=batch,
                durable=True,
                delay_ms=delay,
            )
        await scenario(
            root,
            "256 appenders/8 streams delay=2ms",
            streams=8,
            appenders=256,
            seconds=s,
            batch=batch,
            durable=True,
            delay_ms=2.0,
        )
        await scenario(
            root,
            "64 appenders/1 stream delay=2ms",
            streams=1,
            appenders=64,
            seconds=s,
            batch=batch,
            durable=True,
            delay_ms=2.0,
        )
        await scenario(
            root,
            "non-durable, 64 appenders/8 streams",
            streams=8,
            appenders=64,
            seconds=s,
            batch=batch,
            durable=False,
            delay_ms=2.0,
        )
        await read_scenario(root, s, batch)


if __name__ == "__main__":
    asyncio.run(main())
