"""Benchmark: sfs repository write (and read) throughput.

Prints objects/s for 4 KiB objects (one chunk: the gateway's small-PUT path) from one and
from several threads, 4 KiB reads/s, and MB/s for 64 MiB objects written in 1 MiB pieces with the default
4 MiB chunks. Every write is durable (chunk, manifest and directories fsynced).

    .venv/bin/python benchmarks/sfs_write.py [--dir DIR] [--seconds S]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from crossbeat.repositories.sfs import SfsRepository


def small_objects(repo: SfsRepository, seconds: float, threads: int) -> float:
    data = os.urandom(4096)
    counts = [0] * threads
    deadline = time.perf_counter() + seconds

    def work(slot: int) -> None:
        while time.perf_counter() < deadline:
            repo.put_bytes(data)
            counts[slot] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def small_reads(repo: SfsRepository, count: int) -> float:
    keys = [repo.put_bytes(os.urandom(4096)).dataKey for _ in range(count)]
    start = time.perf_counter()
    for _ in range(5):
        for key in keys:
            repo.read_bytes(key)
    return 5 * count / (time.perf_counter() - start)


def large_objects(repo: SfsRepository, count: int) -> tuple[float, float]:
    piece = os.urandom(1024 * 1024)
    keys = []
    start = time.perf_counter()
    for _ in range(count):
        with repo.writer() as w:
            for _ in range(64):
                w.write(piece)
            keys.append(w.commit().dataKey)
    write_mbs = count * 64 / (time.perf_counter() - start)
    start = time.perf_counter()
    for key in keys:
        for _ in repo.read(key):
            pass
    read_mbs = count * 64 / (time.perf_counter() - start)
    return write_mbs, read_mbs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--large", type=int, default=4, help="number of 64 MiB objects")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sfs-bench-", dir=args.dir))
    try:
        repo = SfsRepository("bench", base)
        one = small_objects(repo, args.seconds, 1)
        many = small_objects(repo, args.seconds, 8)
        gets = small_reads(repo, 200)
        write_mbs, read_mbs = large_objects(repo, args.large)
        print(f"4KiB put 1 thread:  {one:8.0f} objects/s")
        print(f"4KiB put 8 threads: {many:8.0f} objects/s")
        print(f"4KiB get 1 thread:  {gets:8.0f} objects/s (digest verified, page cache warm)")
        print(f"64MiB put: {write_mbs:8.1f} MB/s   64MiB get: {read_mbs:8.1f} MB/s")
        print(f"sfs_4k_objects_per_s={many:.0f} sfs_64m_write_mb_s={write_mbs:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
