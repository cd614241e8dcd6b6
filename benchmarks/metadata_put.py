"""put_version/s on the SQLite metadata store: one thread vs 16 threads (group commit).

Every put is durable when it returns (WAL, synchronous=FULL); with one thread each put pays
its own fsync, with 16 threads concurrent puts share one commit. Also times list_latest over
10,000 keys. Usage: python benchmarks/metadata_put.py [--seconds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from crossbeat.metadata import Bucket, MetadataSettings, new_version_id
from crossbeat.metadata.sqlite import SqliteMetadataStore


def put_for(store: SqliteMetadataStore, threads: int, seconds: float, tag: str) -> float:
    """Run `threads` writers for `seconds`; return puts per second."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def work(i: int) -> None:
        n = 0
        while time.monotonic() < stop:
            vid = new_version_id()
            store.put_version(
                {
                    "bucket": "bench",
                    "key": f"{tag}/{i}/{n}",
                    "versionId": vid,
                    "sortKey": vid,
                    "size": 4096,
                    "etag": '"x"',
                    "location": [{"location": "sfs", "dataKey": vid}],
                }
            )
            n += 1
        counts[i] = n

    started = time.monotonic()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = SqliteMetadataStore(Path(tmp) / "bench.sqlite3", MetadataSettings())
        store.create_bucket(Bucket("bench", "o", "l", "2024-01-01T00:00:00.000Z"))
        results = {}
        for threads in (1, 16):
            before = store.writer_stats.commits, store.writer_stats.operations
            rate = put_for(store, threads, args.seconds, f"t{threads}")
            commits = store.writer_stats.commits - before[0]
            ops = store.writer_stats.operations - before[1]
            results[threads] = rate
            print(
                f"threads={threads:2d} put_version/s={rate:8.0f} "
                f"commits={commits} ops={ops} ops_per_commit={ops / max(commits, 1):.1f}"
            )
        # Listing: make sure there are at least 10k keys, then time paging through them.
        have = len(store.list_latest("bench", limit=10_000))
        if have < 10_000:
            put_for_count = 10_000 - have
            done = threading.Semaphore(0)

            def fill(i: int) -> None:
                for n in range(i, put_for_count, 16):
                    vid = new_version_id()
                    store.put_version(
                        {"bucket": "bench", "key": f"fill/{n}", "versionId": vid, "sortKey": vid}
                    )
                done.release()

            for i in range(16):
                threading.Thread(target=fill, args=(i,)).start()
            for _ in range(16):
                done.acquire()
        started = time.monotonic()
        listed, after = 0, ""
        while listed < 10_000:
            page = store.list_latest("bench", start_after=after, limit=1000)
            listed += len(page)
            after = page[-1]["key"]
        list_ms = (time.monotonic() - started) * 1000
        print(f"list_latest 10000 keys in pages of 1000: {list_ms:.0f} ms")
        store.close()
        print(
            f"put_single_thread={results[1]:.0f}/s put_16_threads={results[16]:.0f}/s "
            f"group_commit_speedup={results[16] / results[1]:.1f}x"
        )


if __name__ == "__main__":
    main()
