"""Virtual-hosted requests (`Host: {bucket}.{domain}`, for the configured
virtual_host_domains, `localhost` by default): the bucket comes from the Host header and the
path is the key, with SigV4 and SigV2 alike. Before, the Host was ignored and `PUT /key`
on such a host created a bucket named `key`."""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from botocore.awsrequest import AWSResponse

from tests.support.gateway import s3_client, signed
from tests.support.procs import Service


class _Raw:
    """What botocore reads an AWSResponse's body from."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def stream(self, **_: Any) -> Any:
        yield self._data.read()

    def read(self, *args: Any) -> bytes:
        return self._data.read(*args)


def _virtual_client(gateway: Service, **config: Any) -> Any:
    """A boto3 client addressing buckets as `{bucket}.localhost:{port}`, whose requests go to
    the gateway's loopback address with that Host (names under localhost need not resolve)."""
    port = urlsplit(gateway.url).port
    client = s3_client(f"http://localhost:{port}", s3={"addressing_style": "virtual"}, **config)

    def via_loopback(request: Any, **_: Any) -> AWSResponse:
        url = urlsplit(request.url)
        body = request.body.read() if hasattr(request.body, "read") else (request.body or b"")
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        headers["Host"] = url.netloc
        target = f"http://127.0.0.1:{port}{url.path}" + (f"?{url.query}" if url.query else "")
        r = httpx.request(request.method, target, headers=headers, content=body, timeout=30)
        return AWSResponse(request.url, r.status_code, dict(r.headers), _Raw(r.content))

    client.meta.events.register("before-send.s3.*", via_loopback)
    return client


@pytest.mark.parametrize("signature_version", ["s3v4", "s3"])
def test_virtual_hosted_requests_address_the_bucket_in_the_host(
    gateway: Service, s3: Any, signature_version: str
) -> None:
    vs3 = _virtual_client(gateway, signature_version=signature_version)
    bucket = f"vhost-{signature_version}"
    vs3.create_bucket(Bucket=bucket)
    assert urlsplit(vs3.meta.endpoint_url).hostname == "localhost"
    vs3.put_object(Bucket=bucket, Key="dir/a key+1", Body=b"hello")
    vs3.put_object(Bucket=bucket, Key="emptyobj", Body=b"")
    assert vs3.get_object(Bucket=bucket, Key="dir/a key+1")["Body"].read() == b"hello"
    listed = [o["Key"] for o in vs3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == ["dir/a key+1", "emptyobj"]
    # the same objects, path-style
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == listed
    assert "emptyobj" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    vs3.delete_object(Bucket=bucket, Key="emptyobj")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["dir/a key+1"]


def test_a_completed_upload_names_the_objects_url_at_its_virtual_host(gateway: Service) -> None:
    """CompleteMultipartUpload's Location is the object's URL as the client addressed it: at
    a virtual host, no bucket in the path (it named the key 'bucket/key' there)."""
    vs3 = _virtual_client(gateway)
    vs3.create_bucket(Bucket="vhost-mpu")
    uid = vs3.create_multipart_upload(Bucket="vhost-mpu", Key="a/k")["UploadId"]
    etag = vs3.upload_part(Bucket="vhost-mpu", Key="a/k", UploadId=uid, PartNumber=1, Body=b"x")["ETag"]
    done = vs3.complete_multipart_upload(Bucket="vhost-mpu", Key="a/k", UploadId=uid,
                                         MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    port = urlsplit(gateway.url).port
    assert done["Location"] == f"http://vhost-mpu.localhost:{port}/a/k"


def test_a_host_outside_the_domains_is_path_style(gateway: Service, s3: Any) -> None:
    s3.create_bucket(Bucket="vhost-path")
    r = signed("PUT", f"{gateway.url}/vhost-path/k", body=b"x", headers={"Host": "elsewhere.example:80"})
    assert r.status_code == 200, r.text
    assert s3.get_object(Bucket="vhost-path", Key="k")["Body"].read() == b"x"


def test_virtual_host_domains_are_configurable(tmp_path: Any) -> None:
    from tests.support.gateway import USERS_TOML, running_gateway

    config = USERS_TOML.replace("[gateway]\n", '[gateway]\nvirtual_host_domains = ["s3.example.test"]\n', 1)
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3_client(gw.url).create_bucket(Bucket="vhost-conf")
        ok = signed("PUT", f"{gw.url}/k", body=b"x", headers={"Host": "vhost-conf.s3.example.test"})
        assert ok.status_code == 200, ok.text
        assert s3_client(gw.url).get_object(Bucket="vhost-conf", Key="k")["Body"].read() == b"x"
        # localhost is no longer one of them: this is path-style, bucket "k2" (absent)
        miss = signed("PUT", f"{gw.url}/k2/obj", body=b"x", headers={"Host": "vhost-conf.localhost"})
        assert miss.status_code == 404 and b"NoSuchBucket" in miss.content
