from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

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
    assert "2:1:4:0,0:4:2:1,3:0:1:4,1:3:4:0,4:1:2:0" in out  # 2 + 2 copies per site
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


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["topology", *args])


def _map(tmp_path: Path, example_path: Path, name: str = "map.toml", **edits: str) -> Path:
    """The example map with textual edits (old=new pairs given as edits values)."""
    text = example_path.read_text()
    for old_new in edits.values():
        old, new = old_new.split("=>")
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


NO_PLACEMENT = "start_index = 0\nshift = 1\n=>"


def _planned_notification(out: Path) -> dict[str, list[int]]:
    doc = json.loads((out / "plan.json").read_text())
    assignment: dict[str, list[int]] = doc["topics"]["crossbeat-bucket-notification"]["assignment"]
    return assignment


def _runbook_notification(text: str) -> dict[str, list[int]]:
    rows = [
        json.loads(line.lstrip("+ ").rstrip(","))
        for line in text.splitlines()
        if '"topic": "crossbeat-bucket-notification"' in line
    ]
    return {str(r["partition"]): r["replicas"] for r in rows}


@pytest.mark.parametrize(
    "options",
    [(), ("--start-index", "1", "--shift", "2"), ("--rack-unaware", "--start-index", "3")],
)
def test_runbooks_restore_the_assignment_plan_created(
    tmp_path: Path, example_path: Path, options: tuple[str, ...]
) -> None:
    site_map = _map(tmp_path, example_path, placement=NO_PLACEMENT)
    _run("plan", str(site_map), "--out", str(tmp_path / "out"), *options)
    planned = _planned_notification(tmp_path / "out")
    back = _run("failback", str(site_map), "--restored", "site2", *options)
    assert _runbook_notification(back) == planned
    again = _run("check", str(site_map), "--json", *options)
    assert again == _run("check", str(site_map), "--json", *options)
    _run("failover", str(site_map), "--lost", "site2", *options)


def test_check_piped_shows_whole_topic_names(tmp_path: Path, example_path: Path) -> None:
    long = "crossbeat-bucket-notification-for-the-analytics-department-eu-west"
    site_map = _map(tmp_path, example_path, topic=f'"crossbeat-bucket-notification"=>"{long}"')
    out = _run("check", str(site_map))  # CliRunner's output is not a terminal
    assert long in out


def test_plan_failure_leaves_the_previous_bundle(
    tmp_path: Path, example_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _run("plan", str(example_path), "--out", str(out))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    renamed = _map(tmp_path, example_path, server='name = "md5"=>name = "md5b"')
    real_write = Path.write_text
    calls = []

    def failing_write(self: Path, *args: Any, **kwargs: Any) -> int:
        calls.append(self)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing_write)
    result = _invoke("plan", str(renamed), "--out", str(out))
    monkeypatch.undo()
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "No space left on device" in result.output and "unchanged" in result.output
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.toml", "out"]


def test_plan_rerun_leaves_no_stale_files(tmp_path: Path, example_path: Path) -> None:
    out = tmp_path / "out"
    _run("plan", str(example_path), "--out", str(out))
    renamed = _map(tmp_path, example_path, server='name = "md5"=>name = "md5b"')
    _run("plan", str(renamed), "--out", str(out))
    assert sorted(p.name for p in (out / "zookeeper").iterdir()) == [
        "md1", "md2", "md3", "md4", "md5b", "wsb1"
    ]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.toml", "out"]


def test_plan_refuses_a_directory_that_is_not_a_bundle(tmp_path: Path, example_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "zookeeper").write_text("my notes")
    result = _invoke("plan", str(example_path), "--out", str(out))
    assert result.exit_code == 1 and "not a previous plan bundle (no plan.json)" in result.output
    assert [p.name for p in out.iterdir()] == ["zookeeper"]
    empty = tmp_path / "empty"
    empty.mkdir()
    _run("plan", str(example_path), "--out", str(empty))
    assert (empty / "plan.json").exists()


def _edit_servers(text: str, names: tuple[str, ...], old: str, new: str) -> str:
    """Replace `old` by `new` inside the [[servers]] blocks of `names` only."""
    blocks = text.split("[[servers]]")
    for i, block in enumerate(blocks):
        if any(f'name = "{n}"\n' in block for n in names):
            assert old in block, (old, block)
            blocks[i] = block.replace(old, new)
    return "[[servers]]".join(blocks)


def _broken(case: str, text: str) -> str:
    if case == "voters only on a minority site":  # KRaft, md1..md3 run no controller
        text = text.replace('quorum = "zookeeper"', 'quorum = "kraft"')
        return _edit_servers(text, ("md1", "md2", "md3"), '"quorum", ', "")
    if case == "empty site listed first":
        return text.replace(
            '[[sites]]\nname = "site2"',
            '[[sites]]\nname = "site0"\nrole = "minority"\n\n[[sites]]\nname = "site2"',
        )
    assert case == "brokerless data site"  # only wsb1 (no broker) left on site2
    return _edit_servers(text, ("md4", "md5"), 'site = "site2"', 'site = "site1"')


@pytest.mark.parametrize("command", [("failover", "--lost"), ("failback", "--restored")])
@pytest.mark.parametrize("mirror_maker", [(), ("--mirror-maker",)])
@pytest.mark.parametrize(
    "case", ["voters only on a minority site", "empty site listed first", "brokerless data site"]
)
def test_broken_maps_are_clean_errors(
    tmp_path: Path,
    example_path: Path,
    case: str,
    command: tuple[str, str],
    mirror_maker: tuple[str, ...],
) -> None:
    site_map = tmp_path / "map.toml"
    site_map.write_text(_broken(case, example_path.read_text()))
    for site in ("site1", "site2"):
        result = _invoke(command[0], str(site_map), command[1], site, *mirror_maker)
        assert result.exit_code == 1
        assert isinstance(result.exception, SystemExit), result.exception
        assert result.output.startswith("Error: ")


def test_mirror_maker_with_a_witness_only_is_a_clean_error(tmp_path: Path) -> None:
    site_map = tmp_path / "mm.toml"
    site_map.write_text(
        "[cluster]\nmin_insync_replicas = 1\n"
        '[[sites]]\nname = "a"\nrole = "majority"\n[[sites]]\nname = "t"\nrole = "witness"\n'
        '[[servers]]\nname = "a1"\nsite = "a"\nid = 1\nservices = ["broker", "quorum"]\n'
        '[[servers]]\nname = "a2"\nsite = "a"\nid = 2\nservices = ["broker", "quorum"]\n'
        '[[servers]]\nname = "t1"\nsite = "t"\nid = 3\nservices = ["quorum-observer"]\n'
    )
    for command in (("failover", "--lost"), ("failback", "--restored")):
        result = _invoke(command[0], str(site_map), command[1], "a", "--mirror-maker")
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
        assert "needs a second site" in result.output


def test_a_binary_map_is_an_error_naming_the_file(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe garbage")
    result = _invoke("check", str(binary))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert str(binary) in result.output


def test_unsafe_names_write_nothing(tmp_path: Path, example_path: Path) -> None:
    site_map = _map(
        tmp_path,
        example_path,
        server='name = "md5"=>name = "../../escaped"',
        topic='"crossbeat-replication-status"=>"../../t; echo pwned"',
    )
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    result = _invoke("plan", str(site_map), "--out", str(work / "out"))
    assert result.exit_code == 1 and "is not a safe name" in result.output
    assert not any(p.is_file() for p in (tmp_path / "a").rglob("*"))
