"""A gateway started on lost metadata deletes nothing: with its database deleted (SQLite then
makes an empty one), its start-up cleanup pass removed every object as an orphan."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import orjson
import pytest

from tests.support.gateway import running_gateway, s3_client, signed
from tests.support.procs import wait_until

pytestmark = pytest.mark.integration


def manifests(data_dir: Path) -> set[str]:
    return {p.parent.name for p in (data_dir / "sfs").glob("*/*/manifest.json")}


def test_a_start_on_lost_metadata_removes_no_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="kept")
        for i in range(5):
            s3.put_object(Bucket="kept", Key=f"k{i}", Body=os.urandom(1000 + i))
    before = manifests(data_dir)
    assert len(before) == 5
    for name in ("metadata.sqlite", "metadata.sqlite-wal", "metadata.sqlite-shm"):
        (data_dir / name).unlink(missing_ok=True)
    with running_gateway(data_dir) as svc:
        assert manifests(data_dir) == before
        assert any("the metadata store names no data" in line for line in svc.output)


def test_a_repository_moved_away_stops_the_start(tmp_path: Path) -> None:
    """Its directory gone, the repository was made afresh, empty: the gateway served every
    object as a 500. Now it does not start, and says why."""
    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="moved")
        s3.put_object(Bucket="moved", Key="k", Body=b"data")
    (data_dir / "sfs").rename(tmp_path / "elsewhere")
    moved = pytest.raises(RuntimeError, match="holds none: is its directory missing or moved")
    with moved, running_gateway(data_dir):
        pass
    shutil.rmtree(data_dir / "sfs")  # the empty one that start made
    (tmp_path / "elsewhere").rename(data_dir / "sfs")
    with running_gateway(data_dir) as svc:
        assert s3_client(svc.url).get_object(Bucket="moved", Key="k")["Body"].read() == b"data"


def test_a_database_deleted_under_a_running_gateway_refuses_writes(tmp_path: Path) -> None:
    """Deleted (or replaced by a restored copy) while in use, the database's commits went on
    into the unlinked file: PUTs were acknowledged and lost at the next start. Now writes are
    503 ServiceUnavailable, and the log says why."""
    data_dir = tmp_path / "data"
    with running_gateway(data_dir, config="[gateway]\nworkers = 1\n") as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="live")
        s3.put_bucket_versioning(Bucket="live", VersioningConfiguration={"Status": "Enabled"})
        s3.put_object(Bucket="live", Key="before", Body=b"x")
        meta = signed("GET", f"{svc.url}/_/crossbeat/metadata/live/before").json()
        replica = orjson.dumps({"replicas": [{
            "metadata": dict(meta, key="replica", versionId="v-replica"), "data": base64.b64encode(b"x").decode()}]})
        stored = manifests(data_dir)
        for name in ("metadata.sqlite", "metadata.sqlite-wal", "metadata.sqlite-shm"):
            (data_dir / name).unlink(missing_ok=True)
        with pytest.raises(s3.exceptions.ClientError) as refused:
            s3.put_object(Bucket="live", Key="after", Body=b"y")
        assert refused.value.response["Error"]["Code"] == "ServiceUnavailable"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        # a replica batch fails whole and retryably (503), not each replica for good
        # (InvalidArgument, which the pipeline takes for a FAILED replication), its data freed
        answer = signed("POST", f"{svc.url}/_/crossbeat/batchReplica", replica)
        assert answer.status_code == 503, answer.text
        assert manifests(data_dir) == stored
        wait_until(lambda: any("was deleted or replaced while in use" in line for line in svc.output),
                   timeout=10, what="the refusal logged")
        assert not any("Traceback" in line for line in svc.output)


def _config(repositories: str, default: str) -> str:
    return f'[gateway]\ndefault_location = "{default}"\n{repositories}'


OLD = '[gateway.repositories.old]\ntype = "sfs"\n'
NEW = '[gateway.repositories.new]\ntype = "sfs"\n'
PROXY = '[gateway.repositories.mig]\ntype = "proxy"\nbackends = ["old", "new"]\npreferred_backend = "new"\n'


def test_data_a_migration_moved_survives_its_proxy_being_taken_out(tmp_path: Path) -> None:
    """A migration (seed 003) moves data to another backend of a proxy and leaves the
    locations naming the old one. Taking the proxy and the emptied old repository out of the
    configuration made the start-up cleanup take every migrated object for an orphan in
    'new' and delete it; putting the proxy back then could not bring them back."""
    from crossbeat.repositories import open_repositories
    from crossbeat.repositories.migration import migrate_object
    from crossbeat.repositories.settings import RepositorySettings

    data_dir = tmp_path / "data"
    bodies = {f"k{i}": os.urandom(1000 + i) for i in range(5)}
    with running_gateway(data_dir, config=_config(OLD, "old")) as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="moved")
        for key, body in bodies.items():
            s3.put_object(Bucket="moved", Key=key, Body=body)
    # The migration, run while the gateway is stopped (as seed 003 allows).
    repos = open_repositories({"old": RepositorySettings(type="sfs"), "new": RepositorySettings(type="sfs")},
                              data_dir)
    try:
        for key in list(repos["old"].keys()):
            migrate_object(repos["old"], repos["new"], key)
    finally:
        for repo in repos.values():
            repo.close()
    migrated = {p.parent.name for p in (data_dir / "repositories/new").glob("*/*/manifest.json")}
    assert len(migrated) == 5

    with running_gateway(data_dir, config=_config(NEW, "new")) as svc:
        kept = {p.parent.name for p in (data_dir / "repositories/new").glob("*/*/manifest.json")}
        assert kept == migrated
        assert any("not configured ('old': 5)" in line for line in svc.output), svc.output[-5:]
    with running_gateway(data_dir, config=_config(OLD + NEW + PROXY, "mig")) as svc:
        s3 = s3_client(svc.url)
        assert {key: s3.get_object(Bucket="moved", Key=key)["Body"].read() for key in bodies} == bodies


@pytest.mark.parametrize("drop", ["abort", "delete_bucket", "complete"])
def test_parts_dropped_before_a_crash_are_freed_at_the_next_start(tmp_path: Path, drop: str) -> None:
    """An abort (a DeleteBucket with open uploads, a Complete leaving parts out) commits, and
    the process dies before freeing the parts' data (thousands of parts take seconds); the
    store did the dropping here, as that process would have. The next start frees them all,
    however many: they were kept for good as implausibly many orphans (more than 100 and 5%
    of the objects), or, with no other data, as a sign of lost metadata."""
    from crossbeat.metadata import open_store

    data_dir = tmp_path / "data"
    with running_gateway(data_dir) as svc:
        s3 = s3_client(svc.url)
        s3.create_bucket(Bucket="kept")
        s3.put_object(Bucket="kept", Key="k", Body=b"kept")
        s3.create_bucket(Bucket="parted")
        uid = s3.create_multipart_upload(Bucket="parted", Key="k")["UploadId"]
        etags = [s3.upload_part(Bucket="parted", Key="k", UploadId=uid, PartNumber=n, Body=os.urandom(100))["ETag"]
                 for n in range(1, 151)]  # fmt: skip
        other = s3.create_multipart_upload(Bucket="kept", Key="gone")["UploadId"]
        s3.upload_part(Bucket="kept", Key="gone", UploadId=other, PartNumber=1, Body=b"x")
        s3.abort_multipart_upload(Bucket="kept", Key="gone", UploadId=other)  # freed, and forgotten
    assert len(manifests(data_dir)) == 151
    store = open_store(data_dir / "metadata.sqlite")
    try:
        assert store.pending_frees() == []
        if drop == "abort":
            store.abort_upload(uid)
        elif drop == "delete_bucket":
            store.delete_bucket("parted")
        else:  # a Complete of the last part alone (the gateway's checks passed earlier)
            part = store.list_parts(uid, marker=149, limit=1)[0]
            meta = {"bucket": "parted", "key": "k", "versionId": "null", "sortKey": "0", "size": 100,
                    "etag": part["etag"], "location": part["location"], "isDeleteMarker": False}
            store.complete_upload(uid, meta)
            kept_part = part["location"][0]["dataKey"]
        assert len(store.pending_frees()) == (149 if drop == "complete" else 150)
    finally:
        store.close()
    with running_gateway(data_dir) as svc:
        s3 = s3_client(svc.url)
        assert len(manifests(data_dir)) == (2 if drop == "complete" else 1)
        assert s3.get_object(Bucket="kept", Key="k")["Body"].read() == b"kept"
        if drop == "complete":  # the part the version names stays
            assert kept_part in manifests(data_dir)
    store = open_store(data_dir / "metadata.sqlite")
    try:
        assert store.pending_frees() == []
    finally:
        store.close()
    assert etags
