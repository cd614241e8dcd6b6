"""One server per data directory: an exclusive lock held for the life of the process.

Two brokers on one stream store, or two gateways on one metadata store and repository,
would each believe they own the files (two `up`s on one data dir did start, sharing
everything). Each server takes `flock` on `{data_dir}/.{role}.lock` before it opens its
stores; the kernel releases it when the process ends, however it ends. Processes forked
after the lock was taken (gateway workers) share it. A lock still held when the server
starts is waited for up to 3 s (the workers of a gateway killed a moment ago exit only
as their parent's death reaches them) and then refused, naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import click

WAIT_S = 3.0


def hold_data_dir(data_dir: Path, role: str) -> int:
    """Lock `data_dir` for `role` (gateway, broker, up) until this process ends; returns the
    lock's file descriptor (kept open on purpose). ClickException if another holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f".{role}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise click.ClickException(
                    f"data dir {data_dir} is in use by another {role} (pid {holder})"
                ) from None
            time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
