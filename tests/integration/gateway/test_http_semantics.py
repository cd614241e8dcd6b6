"""HTTP/1.1 as real clients speak it to the default (`lean`) server, over raw sockets:

- a request asking to upgrade to h2c (Java's HttpClient and `curl --http2` ask on every
  http:// request) is served in HTTP/1.1, body included, and the connection goes on: the
  upgrade is declined as RFC 9110 7.8 allows (the body was taken for empty: IncompleteBody,
  and a second, unrequested 400 followed);
- an absolute-form request target is served (RFC 9112 3.2.2: a server MUST accept it);
- trailer fields of a chunked body are not request headers (RFC 9110 6.5.1): they changed
  the stored Content-Type, depending on how TCP split the request;
- a request line of another HTTP version (HTTP/2.0, HTTP/0.9) is a 505, not served as
  HTTP/1.1;
- a TLS gateway with an idle keep-alive client stops at once (a TLS close waited 30 s for
  the client's close_notify).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client
from tests.support.procs import Service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
BUCKET = "http-semantics"
H2C = {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_gateway(Path(tmp_path_factory.mktemp("http")) / "data") as svc:
        s3_client(svc.url).create_bucket(Bucket=BUCKET)
        yield svc


class _Unsigned(S3SigV4Auth):
    def payload(self, request: Any) -> str:
        return "UNSIGNED-PAYLOAD"


def head(gateway: Service, method: str, path: str, headers: dict[str, str] | None = None,
         *, target: str | None = None) -> bytes:
    """A signed request head (UNSIGNED-PAYLOAD) for `path`; `target` replaces the request
    target on the wire (the signature covers `path`)."""
    req = AWSRequest(method=method, url=f"{gateway.url}{path}",
                     headers=headers or {})
    _Unsigned(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    lines = [f"{method} {target or path} HTTP/1.1", f"Host: {gateway.address}"]
    lines += [f"{k}: {v}" for k, v in req.headers.items() if k.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def responses(sock: socket.socket, count: int, timeout: float = 10) -> list[tuple[int, bytes]]:
    """Read `count` responses (status, body; Content-Length framed), then whatever else
    arrives within 0.3 s: a response beyond `count` fails the test."""
    sock.settimeout(timeout)
    buf = b""
    out: list[tuple[int, bytes]] = []

    def more() -> bool:
        nonlocal buf
        chunk = sock.recv(65536)
        buf += chunk
        return bool(chunk)

    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            assert more(), f"closed after {len(out)} responses"
        raw_head, buf = buf.split(b"\r\n\r\n", 1)
        status = int(raw_head.split(b" ", 2)[1])
        length = 0
        for line in raw_head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buf) < length:
            assert more(), "closed mid-body"
        out.append((status, buf[:length]))
        buf = buf[length:]
    sock.settimeout(0.3)
    with contextlib.suppress(TimeoutError):
        more()
    assert buf == b"", f"more than {count} responses: {buf[:200]!r}"
    return out


def connect(gateway: Service) -> socket.socket:
    return socket.create_connection((gateway.host, gateway.port), timeout=10)


def test_an_upgrade_to_h2c_is_declined_and_the_request_served(gateway: Service) -> None:
    body = b"B" * 5000
    s3 = s3_client(gateway.url)
    with connect(gateway) as sock:
        sock.sendall(head(gateway, "PUT", f"/{BUCKET}/upgraded", {**H2C, "Content-Length": str(len(body))})
                     + body + head(gateway, "GET", f"/{BUCKET}/upgraded", H2C))
        (put, get) = responses(sock, 2)
        assert put[0] == 200, put
        assert get == (200, body)
        # and the connection goes on
        sock.sendall(head(gateway, "GET", f"/{BUCKET}/upgraded"))
        assert responses(sock, 1) == [(200, body)]
    assert s3.get_object(Bucket=BUCKET, Key="upgraded")["Body"].read() == body
    # chunked, the body in pieces after the head
    with connect(gateway) as sock:
        sock.sendall(head(gateway, "PUT", f"/{BUCKET}/upgraded-chunked", {**H2C, "Transfer-Encoding": "chunked"}))
        sock.sendall(b"5\r\nhello\r\n")
        sock.sendall(b"6\r\n world\r\n0\r\n\r\n")
        assert responses(sock, 1)[0][0] == 200
    assert s3.get_object(Bucket=BUCKET, Key="upgraded-chunked")["Body"].read() == b"hello world"


def test_an_absolute_form_target_is_served(gateway: Service) -> None:
    s3_client(gateway.url).put_object(Bucket=BUCKET, Key="absolute", Body=b"abs")
    with connect(gateway) as sock:
        sock.sendall(head(gateway, "GET", f"/{BUCKET}/absolute?x-id=GetObject",
                          target=f"{gateway.url}/{BUCKET}/absolute?x-id=GetObject"))
        assert responses(sock, 1) == [(200, b"abs")]


def test_chunked_trailer_fields_are_not_request_headers(gateway: Service) -> None:
    with connect(gateway) as sock:
        sock.sendall(head(gateway, "PUT", f"/{BUCKET}/trailed",
                          {"Transfer-Encoding": "chunked", "Content-Type": "text/plain"})
                     + b"3\r\nabc\r\n0\r\ncontent-type: text/evil\r\nx-amz-meta-evil: 1\r\n\r\n")
        assert responses(sock, 1)[0][0] == 200
    got = s3_client(gateway.url).head_object(Bucket=BUCKET, Key="trailed")
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {}


def test_host_is_required_once_and_http_1_0_expectations_are_ignored(gateway: Service) -> None:
    """RFC 9112 3.2: an HTTP/1.1 request with no Host or two is a 400; RFC 9110 10.1.1: an
    HTTP/1.0 client's `Expect: 100-continue` gets no 100 (it cannot read one)."""
    signed_head = head(gateway, "GET", f"/{BUCKET}/nothing")
    without = b"\r\n".join(line for line in signed_head.split(b"\r\n") if not line.lower().startswith(b"host:"))
    twice = signed_head.replace(b"\r\n\r\n", f"\r\nHost: {gateway.address}\r\n\r\n".encode())
    for request in (without, twice):
        with connect(gateway) as sock:
            sock.sendall(request)
            assert responses(sock, 1)[0][0] == 400
    http10 = head(gateway, "PUT", f"/{BUCKET}/http10", {"Content-Length": "2", "Expect": "100-continue"})
    with connect(gateway) as sock:
        sock.sendall(http10.replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1))
        sock.settimeout(1.0)  # a 100 came within milliseconds
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.sendall(b"10")
        assert responses(sock, 1)[0][0] == 200

def test_other_http_versions_are_505_and_change_nothing(gateway: Service) -> None:
    """RFC 9110 15.6.6: a request line naming HTTP/2.0 (no HTTP/1.x framing follows it) or
    HTTP/0.9 is refused with 505, not served as if it were HTTP/1.1."""
    for version in (b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.2"):
        signed_head = head(gateway, "PUT", f"/{BUCKET}/versioned-{version[5:].decode()}", {"Content-Length": "2"})
        with connect(gateway) as sock:
            sock.sendall(signed_head.replace(b" HTTP/1.1\r\n", b" " + version + b"\r\n", 1) + b"hi")
            assert responses(sock, 1) == [(505, b"")], version
    with connect(gateway) as sock:  # HTTP/2 with prior knowledge: its connection preface
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        assert responses(sock, 1) == [(505, b"")]
    listed = s3_client(gateway.url).list_objects_v2(Bucket=BUCKET, Prefix="versioned-")
    assert listed["KeyCount"] == 0


def test_a_tls_gateway_with_an_idle_keep_alive_client_stops_at_once(tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    with running_gateway(tmp_path / "data", extra_args=["--tls-cert", str(cert_file), "--tls-key", str(key_file)]) as svc:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        raw = socket.create_connection((svc.host, svc.port), timeout=10)
        idle: Any = context.wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            idle.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # answered (403), kept alive
            assert idle.recv(65536).startswith(b"HTTP/1.1 403")
            began = time.monotonic()
            assert svc.stop(timeout=25) == 0
            assert time.monotonic() - began < 5  # was 30 s, the TLS close's wait
        finally:
            idle.close()
