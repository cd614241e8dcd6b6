"""A gateway started with a TLS certificate that clients will refuse (expired, not valid
yet) or soon will (expiring within two weeks) says so at start, and serves it anyway, as
nginx does; a valid one gets no word. Nothing was said before: every client then failed its
handshake with no hint on the server's side."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from crossbeat.cli.gateway import certificate_warning
from tests.support.gateway import running_gateway
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
NOW = dt.datetime.now(dt.UTC)


def issue(tmp_path: Path, name: str, not_before: dt.datetime, not_after: dt.datetime) -> tuple[Path, Path]:
    import trustme

    cert = trustme.CA().issue_cert("127.0.0.1", not_before=not_before, not_after=not_after)
    cert_file, key_file = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


@pytest.mark.parametrize(("name", "not_before", "not_after", "said"), [
    ("expired", NOW - dt.timedelta(days=30), NOW - dt.timedelta(days=1), "expired on"),
    ("future", NOW + dt.timedelta(days=1), NOW + dt.timedelta(days=30), "is not valid before"),
    ("ending", NOW - dt.timedelta(days=30), NOW + dt.timedelta(days=3), "expires on"),
    ("fine", NOW - dt.timedelta(days=1), NOW + dt.timedelta(days=365), None),
])
def test_certificate_dates_are_judged(tmp_path: Path, name: str, not_before: dt.datetime,
                                      not_after: dt.datetime, said: str | None) -> None:
    cert, _ = issue(tmp_path, name, not_before, not_after)
    warning = certificate_warning(cert)
    if said is None:
        assert warning is None
    else:
        assert warning is not None and said in warning and str(cert) in warning


def test_a_gateway_with_an_expired_certificate_says_so_and_serves_it(tmp_path: Path) -> None:
    cert, key = issue(tmp_path, "expired", NOW - dt.timedelta(days=30), NOW - dt.timedelta(days=1))
    with running_gateway(tmp_path / "data", extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]) as svc:
        assert svc.url.startswith("https://")
        wait_until(lambda: "expired on" in "".join(svc.output), timeout=30, interval=0.1,
                   what="the warning about the expired certificate")
        assert "warning: TLS certificate" in "".join(svc.output)
