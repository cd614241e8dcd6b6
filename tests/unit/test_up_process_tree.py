"""`crossbeat up`'s children do not outlive it, nor do their own children.

`up` itself needs minutes of Spark to start, so these run its `Child` and `Sweeper` in a
small stand-in for `up`: a child that starts a grandchild which, like pyspark's daemons,
moves to a process group of its own and ignores SIGTERM. Before, a `kill -9` of `up` left
all of its ~24 processes running (and a new `up` then refused the data dir).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.procs import wait_until

# The stand-in for `up`: argv = mode, log path. It prints `up SWEEPER` once started and
# `tree CHILD GRANDCHILD` for each run of the child, and reports what it checked itself.
STANDIN = r'''
import os, re, signal, sys, time
from pathlib import Path
from crossbeat.cli.up import Child, Sweeper, session_members

CHILD = """
import os, signal, subprocess, sys
GRANDCHILD = (
    "import os, signal\\n"
    "os.setpgid(0, 0)\\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "print('grandchild', os.getpid(), 'of', os.getppid(), flush=True)\\n"
    "signal.pause()\\n"
)
subprocess.Popen([sys.executable, "-c", GRANDCHILD])
signal.pause()
"""

mode, log = sys.argv[1], Path(sys.argv[2])


def tree(runs):
    """(child, grandchild) of the child's `runs`-th run, once the grandchild is set up."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.findall(r"grandchild (\d+) of (\d+)", log.read_text() if log.exists() else "")
        if len(found) >= runs:
            grandchild, child = map(int, found[runs - 1])
            print("tree", child, grandchild, flush=True)
            return child, grandchild
        time.sleep(0.05)
    raise SystemExit("the child's tree did not start")


sweeper = Sweeper() if mode == "kill9" else None
child = Child("tree", ["-c", CHILD], log, dict(os.environ), sweeper, command=[sys.executable],
              grace=0.5)
child.start()
print("up", sweeper.pid if sweeper else 0, flush=True)
first = tree(1)
if mode == "kill9":
    signal.pause()  # until the test kills us
# a crash of the child: its restart first ends what the crashed run left
os.kill(first[0], signal.SIGKILL)
child.proc.wait()
child.start()
print("after restart, left of the first run:", session_members([first[0]]), flush=True)
second = tree(2)
child.stop(timeout=10)
print("after stop, left of the second run:", session_members([second[0]]), flush=True)
'''


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rindex(b")") + 2:].split()[0] == b"Z"


def _standin(mode: str, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", STANDIN, mode, str(log)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _line(proc: subprocess.Popen[str], prefix: str) -> list[int]:
    assert proc.stdout is not None
    for line in proc.stdout:  # bounded by the stand-in's own 60 s deadline
        if line.startswith(prefix + " "):
            return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"the stand-in ended before printing {prefix!r}")


def test_kill_9_of_up_ends_its_children_and_theirs(tmp_path: Path) -> None:
    """The child goes by PDEATHSIG; the grandchild, which PDEATHSIG does not reach and
    which left the child's process group, goes by the sweeper."""
    up = _standin("kill9", tmp_path / "tree.log")
    try:
        (sweeper,) = _line(up, "up")
        child, grandchild = _line(up, "tree")
        assert not _gone(child) and not _gone(grandchild)
        os.kill(up.pid, signal.SIGKILL)
        up.wait(timeout=30)
        wait_until(lambda: _gone(child) and _gone(grandchild) and _gone(sweeper), timeout=15,
                   what=f"child {child}, grandchild {grandchild} and sweeper {sweeper} to end")
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)


def test_a_restart_or_a_stop_ends_what_the_child_left(tmp_path: Path) -> None:
    """A crashed driver's JVM must not run on beside its restarted successor, and a child
    stopped with SIGTERM must not leave its children behind."""
    up = _standin("restart", tmp_path / "tree.log")
    try:
        out, _ = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
    assert up.returncode == 0, out
    runs = [tuple(map(int, m)) for m in re.findall(r"^tree (\d+) (\d+)$", out, re.M)]
    assert len(runs) == 2 and runs[0] != runs[1], out
    assert "after restart, left of the first run: []" in out, out
    assert "after stop, left of the second run: []" in out, out
    for child, grandchild in runs:
        assert _gone(child) and _gone(grandchild), (child, grandchild, out)
