"""Real S3 clients against the gateway: boto3 over https, aws cli, rclone, s3cmd."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from tests.support.gateway import ROOT_AK, ROOT_SK, s3_client
from tests.support.procs import Service

pytestmark = pytest.mark.compat
MiB = 1024 * 1024
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = shutil.which(name, path=f"{BIN}:{os.environ.get('PATH', '')}")
    if path is None:
        pytest.skip(f"{name} is not installed (make install provides it)")
    return path


def client_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AWS_ACCESS_KEY_ID": ROOT_AK, "AWS_SECRET_ACCESS_KEY": ROOT_SK, "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(tmp / "aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "aws-creds"),
        "HOME": str(tmp),
    })
    env.pop("AWS_CA_BUNDLE", None)
    return env


def rclone_command(gateway: Service, tmp: Path) -> list[str]:
    """rclone with a config naming the gateway as remote `cb`, retries off."""
    conf = tmp / "rclone.conf"
    conf.write_text(
        "[cb]\ntype = s3\nprovider = Other\nenv_auth = false\n"
        f"access_key_id = {ROOT_AK}\nsecret_access_key = {ROOT_SK}\n"
        f"endpoint = {gateway.url}\nregion = us-east-1\n"
    )
    return [tool("rclone"), "--config", str(conf), "--low-level-retries", "1", "--retries", "1"]


def s3cmd_command(gateway: Service, tmp: Path) -> list[str]:
    """s3cmd with a config for the gateway (path-style, SigV4, plain http)."""
    cfg = tmp / "s3cfg"
    cfg.write_text(
        "[default]\n"
        f"access_key = {ROOT_AK}\nsecret_key = {ROOT_SK}\n"
        f"host_base = {gateway.address}\nhost_bucket = {gateway.address}\nuse_https = False\n"
        "signature_v2 = False\nbucket_location = us-east-1\n"
    )
    return [tool("s3cmd"), "-c", str(cfg)]


def run(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180, **kw)
    assert r.returncode == 0, f"{args[0]} failed: {r.stdout}\n{r.stderr}"
    return r


def test_boto3_over_https_with_aws_chunked_bodies(tls_gateway: tuple[Service, Path]) -> None:
    svc, ca = tls_gateway
    s3 = boto3.client("s3", endpoint_url=svc.url, aws_access_key_id=ROOT_AK, aws_secret_access_key=ROOT_SK,
                      region_name="us-east-1", verify=str(ca), config=Config(retries={"max_attempts": 1}))
    s3.create_bucket(Bucket="tls")
    s3.put_object(Bucket="tls", Key="hello", Body=b"hello world")  # STREAMING-UNSIGNED-PAYLOAD-TRAILER
    assert s3.get_object(Bucket="tls", Key="hello", ChecksumMode="ENABLED")["Body"].read() == b"hello world"
    data = os.urandom(12 * MiB)
    s3.upload_fileobj(io.BytesIO(data), "tls", "mpu", Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    assert hashlib.sha256(s3.get_object(Bucket="tls", Key="mpu")["Body"].read()).digest() == hashlib.sha256(data).digest()
    s3.upload_fileobj(io.BytesIO(b"x" * 1000), "tls", "small")
    assert s3.get_object(Bucket="tls", Key="small")["Body"].read() == b"x" * 1000
    # CompleteMultipartUpload's Location is the object's absolute URL, scheme included
    uid = s3.create_multipart_upload(Bucket="tls", Key="a b/c")["UploadId"]
    etag = s3.upload_part(Bucket="tls", Key="a b/c", UploadId=uid, PartNumber=1, Body=b"p")["ETag"]
    done = s3.complete_multipart_upload(Bucket="tls", Key="a b/c", UploadId=uid,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert done["Location"] == f"{svc.url}/tls/a%20b/c"


def test_presigned_urls_v2_and_v4(gateway: Service) -> None:
    import httpx

    s3 = s3_client(gateway.url)
    s3.create_bucket(Bucket="presigned")
    s3.put_object(Bucket="presigned", Key="p", Body=b"shared")
    v2 = s3.generate_presigned_url("get_object", Params={"Bucket": "presigned", "Key": "p"}, ExpiresIn=60)
    assert httpx.get(v2).content == b"shared"
    s3v4 = s3_client(gateway.url, signature_version="s3v4")
    v4 = s3v4.generate_presigned_url("get_object", Params={"Bucket": "presigned", "Key": "p"}, ExpiresIn=60)
    assert httpx.get(v4).content == b"shared"
    put = s3v4.generate_presigned_url("put_object", Params={"Bucket": "presigned", "Key": "up"}, ExpiresIn=60)
    assert httpx.put(put, content=b"uploaded").status_code == 200
    assert s3.get_object(Bucket="presigned", Key="up")["Body"].read() == b"uploaded"
    assert httpx.get(v4.replace("presigned/p", "presigned/up")).status_code == 403


def test_aws_cli(gateway: Service, tmp_path: Path) -> None:
    aws = tool("aws")
    env = client_env(tmp_path)
    ep = ["--endpoint-url", gateway.url]
    run([aws, "s3", "mb", "s3://awscli", *ep], env)
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i}.bin": os.urandom(1000 * (i + 1)) for i in range(5)}
    files["big.bin"] = os.urandom(9 * MiB)
    for name, data in files.items():
        (src / name).write_bytes(data)
    run([aws, "s3", "sync", str(src), "s3://awscli/dir", *ep], env)
    listing = run([aws, "s3", "ls", "s3://awscli/dir/", *ep], env).stdout
    for name in files:
        assert name in listing
    dst = tmp_path / "dst"
    run([aws, "s3", "cp", "--recursive", "s3://awscli/dir", str(dst), *ep], env)
    for name, data in files.items():
        assert (dst / name).read_bytes() == data
    run([aws, "s3api", "put-bucket-versioning", "--bucket", "awscli", "--versioning-configuration", "Status=Enabled", *ep], env)
    run([aws, "s3", "rm", "--recursive", "s3://awscli/dir", *ep], env)
    remaining = s3_client(gateway.url).list_objects_v2(Bucket="awscli", Prefix="dir/")
    assert remaining["KeyCount"] == 0
    markers = s3_client(gateway.url).list_object_versions(Bucket="awscli", Prefix="dir/")
    assert len(markers.get("DeleteMarkers", [])) == len(files)


def test_rclone(gateway: Service, tmp_path: Path) -> None:
    env = client_env(tmp_path)
    base = rclone_command(gateway, tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    files = {f"r{i}.bin": os.urandom(2000 + i) for i in range(10)}
    files["large.bin"] = os.urandom(12 * MiB)  # above rclone's upload cutoff? uses multipart at 200M by default
    for name, data in files.items():
        (src / name).write_bytes(data)
    run([*base, "mkdir", "cb:rclone"], env)
    run([*base, "copy", str(src), "cb:rclone/data", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"], env)
    run([*base, "check", str(src), "cb:rclone/data"], env)
    listed = run([*base, "lsf", "cb:rclone/data"], env).stdout.split()
    assert sorted(listed) == sorted(files)
    dst = tmp_path / "dst"
    run([*base, "copy", "cb:rclone/data", str(dst)], env)
    for name, data in files.items():
        assert (dst / name).read_bytes() == data
    run([*base, "delete", "cb:rclone/data/r0.bin"], env)
    assert "r0.bin" not in run([*base, "lsf", "cb:rclone/data"], env).stdout


def test_s3cmd(gateway: Service, tmp_path: Path) -> None:
    env = client_env(tmp_path)
    base = s3cmd_command(gateway, tmp_path)
    run([*base, "mb", "s3://s3cmd-bkt"], env)
    f = tmp_path / "s.bin"
    data = os.urandom(20_000)
    f.write_bytes(data)
    run([*base, "put", str(f), "s3://s3cmd-bkt/dir/s.bin"], env)
    big = tmp_path / "big.bin"
    big_data = os.urandom(16 * MiB)
    big.write_bytes(big_data)
    run([*base, "put", "--multipart-chunk-size-mb=5", str(big), "s3://s3cmd-bkt/big.bin"], env)
    out = run([*base, "ls", "s3://s3cmd-bkt/dir/"], env).stdout
    assert "s3://s3cmd-bkt/dir/s.bin" in out
    run([*base, "get", "s3://s3cmd-bkt/dir/s.bin", str(tmp_path / "back.bin")], env)
    assert (tmp_path / "back.bin").read_bytes() == data
    run([*base, "get", "s3://s3cmd-bkt/big.bin", str(tmp_path / "big-back.bin")], env)
    assert (tmp_path / "big-back.bin").read_bytes() == big_data
    run([*base, "del", "s3://s3cmd-bkt/dir/s.bin"], env)
    assert "s.bin" not in run([*base, "ls", "s3://s3cmd-bkt/dir/"], env).stdout
