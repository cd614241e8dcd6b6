"""The session crossbeat pipelines run in: a local one listens on loopback only."""

from __future__ import annotations

import socket
from typing import Any


def _outward_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.254", 9))
        return str(s.getsockname()[0])


def test_a_local_session_listens_on_loopback_only(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    port = int(conf.get("spark.driver.port"))
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the driver's RPC port answers on loopback...
    outward = _outward_address()
    assert not outward.startswith("127.")
    with socket.socket() as s:  # ...and not on the machine's network address
        s.settimeout(2)
        assert s.connect_ex((outward, port)) != 0, f"driver port open on {outward}"
