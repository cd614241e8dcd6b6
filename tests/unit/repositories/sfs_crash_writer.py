"""Child process for the crash test: writes objects on several threads until killed.

Prints `PARTIAL KEY` for one write it never commits, then `KEY SIZE` (flushed) for every object whose commit returned, i.e. acknowledged.
Contents are derived from the key, so the parent can check them byte for byte.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading

from crossbeat.repositories.sfs import SfsRepository

lock = threading.Lock()


def content(key: str, size: int) -> bytes:
    return hashlib.shake_128(key.encode()).digest(size)


def work(repo: SfsRepository, seed: int) -> None:
    rng = random.Random(seed)
    while True:
        w = repo.writer()
        size = rng.choice([0, 10, 1000, 1024, 5000, 30_000])
        data = content(w.data_key, size)
        for i in range(0, size, 700):
            w.write(data[i : i + 700])
        loc = w.commit()
        with lock:
            sys.stdout.write(f"{loc.dataKey} {loc.size}\n")
            sys.stdout.flush()


def main() -> None:
    repo = SfsRepository("crash", sys.argv[1], chunk_size=1024)
    # One write that is certainly in flight at the kill: chunks on disk, never committed.
    stuck = repo.writer()
    stuck.write(b"s" * 3000)
    sys.stdout.write(f"PARTIAL {stuck.data_key}\n")
    threads = [threading.Thread(target=work, args=(repo, i), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
