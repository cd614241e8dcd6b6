"""Fixtures' building blocks for tests that need a real crossbeat gateway process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from tests.support.procs import Service, start_service

ROOT_AK = "CBTESTROOTACCESSKEY0"
ROOT_SK = "cb/test/root/secret/key/0123456789abcdef"
USER_AK = "CBTESTUSERACCESSKEY1"
USER_SK = "cb/test/user/secret/key/0123456789abcdef"

USERS_TOML = f"""
[gateway]
[[gateway.users]]
access_key = "{USER_AK}"
secret_key = "{USER_SK}"
display_name = "alice"
"""


@contextmanager
def running_gateway(
    data_dir: Path,
    *,
    extra_args: list[str] | None = None,
    config: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Service]:
    """A gateway subprocess on a free port with the test root credentials (and `env`); a
    relative `data_dir` is relative to `cwd`, the gateway's working directory."""
    where = (cwd or Path.cwd()) / data_dir
    where.mkdir(parents=True, exist_ok=True)
    cfg = where.parent / f"{where.name}.toml"
    cfg.write_text(config if config is not None else USERS_TOML)
    args = ["gateway", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--config", str(cfg)]
    svc = start_service(
        args + list(extra_args or []),
        env={"CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK, **(env or {})},
        cwd=cwd,
    )
    try:
        yield svc
    finally:
        svc.stop()


def s3_client(url: str, ak: str = ROOT_AK, sk: str = ROOT_SK, **config: Any) -> Any:
    cfg = Config(retries={"max_attempts": 1, "mode": "standard"}, **config)
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=ak,
        aws_secret_access_key=sk,
        region_name="us-east-1",
        config=cfg,
        verify=False,
    )


def signed(method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None,
           ak: str = ROOT_AK, sk: str = ROOT_SK) -> httpx.Response:
    """A raw request signed with SigV4 (for the internal routes)."""
    req = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(ak, sk), "s3", "us-east-1").add_auth(req)
    # latin-1, as HTTP carries header bytes (httpx would refuse a str beyond ASCII)
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in req.headers.items()]
    return httpx.request(method, url, content=body, headers=raw, timeout=60)
