from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from crossbeat.cli.main import cli


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["topology", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_check_json_reproduces_the_seed(example_path: Path) -> None:
    doc = json.loads(_run("check", str(example_path), "--json"))
    scenarios = {tuple(s["lost"]): s for s in doc["scenarios"]}
    assert len(doc["scenarios"]) == len(scenarios) == 6 + 15 + 2  # servers, pairs, sites
    for lost, s in scenarios.items():
        notif = s["topics"]["crossbeat-bucket-notification"]
        if len(lost) == 1:
            assert s["quorum_ok"] and notif == {"partitions": 5, "writable": 5, "may_lose_acked": 0}
    assert not scenarios[("md1", "md2", "md3")]["quorum_ok"]


def test_check_rack_unaware_shows_partition_4_lost_with_the_majority(example_path: Path) -> None:
    args = (
        "check",
        str(example_path),
        "--json",
        "--rack-unaware",
        "--start-index",
        "4",
        "--shift",
        "3",
    )
    doc = json.loads(_run(*args))
    majority = next(s for s in doc["scenarios"] if s["lost"] == ["md1", "md2", "md3"])
    assert majority["topics"]["crossbeat-replication"]["may_lose_acked"] == 3


def test_check_table(example_path: Path) -> None:
    out = _run("check", str(example_path))
    assert "md1+md2" in out and "site1" in out and "lost" in out


def test_plan_writes_the_bundle(example_path: Path, tmp_path: Path) -> None:
    out = _run("plan", str(example_path), "--out", str(tmp_path / "plan"))
    assert "2:1:4:0,0:4:2:3,3:0:1:4,1:3:4:2,4:1:2:0" in out
    props = (tmp_path / "plan" / "brokers" / "md4" / "server.properties").read_text()
    assert "broker.rack=site2" in props


def test_failover_and_failback(example_path: Path) -> None:
    assert "promote the observer" in _run("failover", str(example_path), "--lost", "site1")
    assert "Restore the planned assignment" in _run(
        "failback", str(example_path), "--restored", "site2"
    )
    assert "restart point" in _run(
        "failover", str(example_path), "--lost", "site1", "--mirror-maker"
    )


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[sites]]\nname = "a"\nrole = "majority"\n[[servers]]\nname = "x"\nsite = "b"\nid = 1\n'
    )
    result = CliRunner().invoke(cli, ["topology", "plan", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "servers[0].site: unknown site 'b'" in result.output
    assert not (tmp_path / "o").exists()


def test_unknown_site_is_refused(example_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["topology", "failover", str(example_path), "--lost", "nowhere"]
    )
    assert result.exit_code == 1 and "unknown site 'nowhere'" in result.output
