"""A small filesystem of its own for tests that fill a disk: a tmpfs mounted for the test
(needs root, as `make test` runs here; elsewhere the test is skipped)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_filesystem(mountpoint: Path, size_mib: int) -> Iterator[Path]:
    """`mountpoint` as a tmpfs of `size_mib` MiB until the block ends."""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mountpoint)],
        capture_output=True, text=True, check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(path: Path, leave: int = 0) -> None:
    """Take every byte left on `path`'s filesystem but about `leave`, in the file `path`."""
    free = os.statvfs(path.parent)
    if free.f_blocks * free.f_frsize > 1024 * 1024 * 1024:  # not one of ours: never fill it
        raise RuntimeError(f"{path.parent} is not a small filesystem (was it unmounted?)")
    budget = max(free.f_bavail * free.f_frsize - leave, 0) if leave else None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        written = 0
        with contextlib.suppress(OSError):
            while budget is None or written < budget:
                chunk = 64 * 1024 if budget is None else min(64 * 1024, budget - written)
                written += os.write(fd, bytes(chunk))
        if budget is None:
            with contextlib.suppress(OSError):
                while True:  # the last partial block
                    os.write(fd, b"\0")
    finally:
        os.close(fd)
