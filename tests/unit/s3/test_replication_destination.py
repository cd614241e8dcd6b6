"""What a replication configuration must say about its destination (crossbeat's rules beside
AWS's), and what a version records of it (replicationInfo `destination`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from crossbeat.cli.up import _config
from crossbeat.config import load_toml, section_settings
from crossbeat.metadata import Bucket
from crossbeat.s3.errors import S3Error
from crossbeat.s3.replication import replication_info
from crossbeat.s3.replication_config import parse_replication
from crossbeat.s3.settings import GatewaySettings
from tests.unit.s3.test_replication_config import config, rule


def refusal(body: bytes, sites: list[str] | None = None) -> S3Error:
    with pytest.raises(S3Error) as info:
        parse_replication(body, "Enabled", sites)
    return info.value


def test_a_rule_without_storage_class_is_refused_naming_what_it_needs() -> None:
    error = refusal(config(rule(rule_id="no-class", storage_class=None)))
    assert error.code == "InvalidRequest" and error.status == 400
    assert "'no-class'" in error.message and "StorageClass" in error.message
    assert "configured: b, c" in refusal(config(rule(storage_class=None)), ["c", "b"]).message


@pytest.mark.parametrize("storage_class", ["STANDARD", "c", "b,c"])
def test_a_site_the_gateway_does_not_know_is_refused_naming_the_known_ones(storage_class: str) -> None:
    error = refusal(config(rule(storage_class=storage_class)), ["b"])
    assert error.code == "InvalidRequest"
    unknown = storage_class.split(",")[-1]
    assert f"'{unknown}' is not a configured site (configured: b)" in error.message
    # a gateway not told the sites takes any name (the pipeline fails the unknown ones)
    assert parse_replication(config(rule(storage_class=storage_class)), "Enabled")["rules"]


def test_known_sites_are_taken() -> None:
    parsed = parse_replication(config(rule(storage_class=" b , c")), "Enabled", ["b", "c"])
    assert parsed["rules"][0]["destination"]["storageClass"] == "b , c"


def test_rules_naming_several_destination_buckets_are_refused() -> None:
    body = config(rule(rule_id="x", priority="1", bucket="arn:aws:s3:::one"),
                  rule(rule_id="y", priority="2", bucket="arn:aws:s3:::two"))
    error = refusal(body)
    assert error.code == "InvalidRequest"
    assert "arn:aws:s3:::one, arn:aws:s3:::two" in error.message


def bucket_with(body: bytes) -> Bucket:
    return Bucket(name="src", owner="o", location="", created="2026-01-01T00:00:00.000Z",
                  versioning="Enabled", replication=parse_replication(body, "Enabled"))


def test_a_version_records_the_rules_destination_bucket() -> None:
    bucket = bucket_with(config(
        rule(rule_id="low", priority="1", filter_xml="<Filter/>", storage_class="b", dmr="Enabled",
             bucket="arn:aws:s3:::dst"),
        rule(rule_id="high", priority="2", filter_xml="<Filter><Prefix>p/</Prefix></Filter>",
             storage_class="c", bucket="arn:aws:s3:::dst"),
    ))
    info = replication_info(bucket, "p/k", {})
    assert info is not None
    assert info["destination"] == "arn:aws:s3:::dst"
    assert [b["site"] for b in info["backends"]] == ["c", "b"]
    marker = replication_info(bucket, "p/k", {}, delete_marker=True)
    assert marker is not None and marker["destination"] == "arn:aws:s3:::dst"
    assert [b["site"] for b in marker["backends"]] == ["b"]


def test_a_stored_configuration_with_several_buckets_keeps_each_version_to_one() -> None:
    """Stored before several buckets were refused: the highest-priority rule's bucket, and
    only the sites of the rules to it."""
    bucket = bucket_with(config(rule(rule_id="x", priority="1", filter_xml="<Filter/>", storage_class="b")))
    assert bucket.replication is not None
    other = dict(bucket.replication["rules"][0], id="y", priority=2)
    other["destination"] = dict(other["destination"], bucket="arn:aws:s3:::other", storageClass="c")
    bucket.replication["rules"].append(other)
    info = replication_info(bucket, "k", {})
    assert info is not None
    assert info["destination"] == "arn:aws:s3:::other"
    assert [b["site"] for b in info["backends"]] == ["c"]


def test_gateway_replication_sites_setting() -> None:
    assert GatewaySettings().replication_sites is None
    assert GatewaySettings(replication_sites=[" b ", "c"]).replication_sites == ["b", "c"]
    for bad in (["b,c"], [""]):
        with pytest.raises(ValidationError):
            GatewaySettings(replication_sites=bad)


def test_up_tells_site_a_the_sites_its_rules_may_name(tmp_path: Path) -> None:
    doc = load_toml(_config(tmp_path, 8000))
    assert section_settings(GatewaySettings, doc, "gateway").replication_sites == ["b"]
    assert sorted(doc["extensions"]["replication"]["sites"]) == ["b"]
