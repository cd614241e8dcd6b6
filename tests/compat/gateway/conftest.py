from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import running_gateway
from tests.support.procs import Service


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("gw")) / "data") as svc:
        yield svc


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Path]]:
    """A gateway over https with a certificate made for the test; yields (service, CA file)."""
    import trustme

    base = Path(tmp_path_factory.mktemp("tls"))
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file, ca_file = base / "cert.pem", base / "key.pem", base / "ca.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    ca.cert_pem.write_to_path(str(ca_file))
    with running_gateway(base / "data", extra_args=["--tls-cert", str(cert_file), "--tls-key", str(key_file)]) as svc:
        yield svc, ca_file
