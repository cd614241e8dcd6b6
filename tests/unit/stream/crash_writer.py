"""Helper process for test_crash: appends durably forever, printing each acknowledgement.

Usage: python crash_writer.py DATA_DIR RUN. Prints `ready`, then one line per acknowledged
append: `ack <stream> <writer> <seq> <base offset>` (record values are
`<run>:<stream>:<writer>:<seq>` repeated 3 times, then the same plus `+`), flushed before the next append, until
it is killed.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from crossbeat.stream import StreamSettings, StreamStore

SETTINGS = StreamSettings(segment_bytes=4096, index_interval_bytes=256, flush_max_delay_ms=1.0)
STREAMS = ("a", "b")
WRITERS_PER_STREAM = 4


def batch(value: bytes) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    builder.append(1, timestamp=1_700_000_000_000, key=None, value=value + b"+", headers=[])
    return builder.build()


async def main(data_dir: Path, run: str) -> None:
    store = await StreamStore.open(data_dir, SETTINGS)
    streams = [store.get_stream(n) or store.create_stream(n) for n in STREAMS]
    print("ready", flush=True)
    out = sys.stdout

    async def writer(stream_no: int, writer_no: int) -> None:
        stream = streams[stream_no]
        seq = 0
        while True:
            value = f"{run}:{STREAMS[stream_no]}:{writer_no}:{seq}".encode() * 3
            base = await stream.append(batch(value), durable=True)
            out.write(f"ack {STREAMS[stream_no]} {writer_no} {seq} {base}\n")
            out.flush()
            seq += 1

    await asyncio.gather(
        *(writer(s, w) for s in range(len(STREAMS)) for w in range(WRITERS_PER_STREAM))
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
