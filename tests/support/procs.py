"""Starting our own servers as real subprocesses on port 0, for integration tests.

Convention every crossbeat server follows: once it is bound and ready it prints one line
`crossbeat <service> listening on <scheme>://<host>:<port>` to stdout and flushes.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LISTEN_RE = re.compile(r"crossbeat (\S+) listening on (\S+)://([^\s:]+):(\d+)")


@dataclass
class Service:
    """A running crossbeat server process and where it listens."""

    proc: subprocess.Popen[str]
    scheme: str
    host: str
    port: int
    output: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing gets a chance to flush."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in `timeout` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


def start_service(
    args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 60,
    cwd: Path | None = None,
) -> Service:
    """Run `crossbeat ARGS…` and wait (bounded) for its listening line."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossbeat", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=cwd,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            proc.kill()
            raise TimeoutError(f"crossbeat {args[0]} did not start:\n{''.join(output)}")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            proc.wait(timeout=10)
            raise RuntimeError(
                f"crossbeat {args[0]} exited with {proc.returncode}:\n{''.join(output)}"
            )
        m = LISTEN_RE.search(line)
        if m:
            return Service(proc, m.group(2), m.group(3), int(m.group(4)), output)


def wait_until(predicate: Any, timeout: float = 30, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll `predicate` until it returns a truthy value (returned) or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last failure
            last_exc = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}" + (f": {last_exc!r}" if last_exc else ""))


def _tree_files(svc: Service, name: str) -> dict[int, str]:
    """/proc/PID/`name` of the service's process and of each of its descendants, by pid."""
    pids, out = [svc.proc.pid], {}
    while pids:
        pid = pids.pop()
        try:
            out[pid] = Path(f"/proc/{pid}/{name}").read_text()
            for task in Path(f"/proc/{pid}/task").iterdir():
                pids.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile
    return out


def peak_rss_mib(svc: Service) -> dict[int, float]:
    """The peak resident memory (VmHWM, MiB) of the service's process and of each of its
    descendants (a gateway's worker processes), by pid. Compare two readings process by
    process: the parent alone says nothing of what its workers hold."""
    out = {}
    for pid, status in _tree_files(svc, "status").items():
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                out[pid] = int(line.split()[1]) / 1024
    return out


def bytes_read(svc: Service) -> int:
    """Bytes the service's processes have read by read(2) and its kind so far (rchar: files,
    sockets and pipes, whether or not from the page cache)."""
    total = 0
    for io in _tree_files(svc, "io").values():
        for line in io.splitlines():
            if line.startswith("rchar:"):
                total += int(line.split()[1])
    return total


def rss_growth_mib(before: dict[int, float], after: dict[int, float]) -> float:
    """The largest growth of one process's peak memory between two `peak_rss_mib` readings
    (a process that appeared in between counts from zero)."""
    return max((peak - before.get(pid, 0.0) for pid, peak in after.items()), default=0.0)
