"""A new `crossbeat up` on a data dir that processes of an earlier run still hold names
them. It said only "gateway-a exited; … in use by another gateway (pid N)", one process
of the ~24 a killed `up` used to leave, with no way to find the others."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.procs import start_service

ENV = {**os.environ, "CROSSBEAT_ACCESS_KEY": "a", "CROSSBEAT_SECRET_KEY": "b"}
ENV.pop("CROSSBEAT_DEBUG", None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_up_names_the_processes_left_holding_its_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    leftover = start_service(["gateway", "--data-dir", str(data / "site-a"), "--listen", "127.0.0.1:0"],
                             env=ENV)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "crossbeat", "up", "--data-dir", str(data),
             "--port-base", str(_free_port())],
            env=ENV, capture_output=True, text=True, timeout=120,
        )
    finally:
        assert leftover.stop() == 0
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"Error: data dir {data} is still in use"), result.stderr
    # the gateway's supervisor, with its command line, and how to stop it
    assert re.search(rf"^  pid {leftover.proc.pid}: .*crossbeat gateway --data-dir {data}/site-a",
                     result.stderr, re.M), result.stderr
    kill = re.search(r"\(kill ([\d ]+)\)", result.stderr)
    assert kill is not None and str(leftover.proc.pid) in kill.group(1).split(), result.stderr
    assert not (data / "logs").exists()  # nothing was started
