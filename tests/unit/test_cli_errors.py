"""The CLI on a bad environment: a one-line `Error:` naming the file, address or setting,
exit status 1, no traceback, nothing started; and one server per data directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import start_service

ENV = {**os.environ, "CROSSBEAT_ACCESS_KEY": "a", "CROSSBEAT_SECRET_KEY": "b"}
ENV.pop("CROSSBEAT_DEBUG", None)


def crossbeat(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crossbeat", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=60)


def assert_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("Error: "), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_a_data_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert_error(crossbeat("broker", "--data-dir", "afile/sub", "--listen", "127.0.0.1:0", cwd=tmp_path),
                 "Not a directory", "afile/sub")


def test_a_config_that_is_not_toml_text_or_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "bin.toml").write_bytes(b"\x00\xff")
    assert_error(crossbeat("broker", "--config", "bin.toml", cwd=tmp_path), "bin.toml", "not valid TOML")
    (tmp_path / "flat.toml").write_text("gateway = 5\n")
    assert_error(crossbeat("gateway", "--data-dir", "d", "--config", "flat.toml", cwd=tmp_path),
                 "[gateway] must be a table")
    assert not (tmp_path / "d").exists()


def test_tls_needs_a_loadable_certificate_and_key(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    assert_error(crossbeat("gateway", "--data-dir", "d", "--listen", "127.0.0.1:0", "--tls-cert", "cert.pem",
                           cwd=tmp_path), "--tls-key")
    result = crossbeat("gateway", "--data-dir", "d", "--listen", "127.0.0.1:0", "--tls-cert", "cert.pem",
                       "--tls-key", "cert.pem", cwd=tmp_path)
    assert_error(result, "cert.pem")
    assert "listening" not in result.stdout


@pytest.mark.parametrize(("users", "words"), [
    ('access_key = "a"\nsecret_key = "mine"', ["'a'", "root credentials'"]),
    ('access_key = "u"\nsecret_key = "1"\n[[gateway.users]]\naccess_key = "u"\nsecret_key = "2"',
     ["'u'", "another user's"]),
    ('access_key = ""\nsecret_key = "x"', ["must not be empty"]),
])
def test_a_gateway_user_needs_an_access_key_of_its_own(
    tmp_path: Path, users: str, words: list[str],
) -> None:
    """A user reusing root's access key replaced root without a word: root's own secret was
    refused and the user owned root's buckets and its admin rights."""
    (tmp_path / "users.toml").write_text(f"[gateway]\n[[gateway.users]]\n{users}\n")
    result = crossbeat("gateway", "--data-dir", "d", "--listen", "127.0.0.1:0",
                       "--config", "users.toml", cwd=tmp_path)
    assert_error(result, *words)
    assert "listening" not in result.stdout


def test_the_replication_pipeline_needs_a_destination(tmp_path: Path) -> None:
    assert_error(crossbeat("pipeline", "replication", "--data-dir", "p", cwd=tmp_path),
                 "[extensions.replication.sites.NAME]")


@pytest.mark.parametrize("role", ["broker", "gateway"])
def test_one_server_per_data_dir(tmp_path: Path, role: str) -> None:
    first = start_service([role, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"], env=ENV)
    try:
        second = crossbeat(role, "--data-dir", "d", "--listen", "127.0.0.1:0", cwd=tmp_path)
        assert_error(second, f"in use by another {role}", f"pid {first.proc.pid}")
    finally:
        assert first.stop() == 0
    # released when the holder ends
    again = start_service([role, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"], env=ENV)
    assert again.stop() == 0


def test_populate_needs_a_gateway_url(tmp_path: Path) -> None:
    """`--gateway notaurl` printed "ready" and then died with an AttributeError."""
    result = crossbeat("populate", "--gateway", "notaurl", "--data-dir", "p", cwd=tmp_path)
    assert_error(result, "gateway must be an http(s)://HOST[:PORT] URL", "notaurl")
    assert "ready" not in result.stdout


def test_a_misspelt_environment_variable_is_warned_about(tmp_path: Path) -> None:
    env = {**ENV, "CROSSBEAT_SECRET_KEYS": "x", "CROSSBEAT_BROKER_GROUP_MAX_SESION_TIMEOUT_MS": "1",
           "CROSSBEAT_WORKERS": "1", "CROSSBEAT_BROKER_NODE_ID": "1"}
    result = subprocess.run([sys.executable, "-m", "crossbeat", "topology", "--help"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [
        "warning: CROSSBEAT_BROKER_GROUP_MAX_SESION_TIMEOUT_MS is not a crossbeat setting and is ignored"
        " (did you mean CROSSBEAT_BROKER_GROUP_MAX_SESSION_TIMEOUT_MS?)",
        "warning: CROSSBEAT_SECRET_KEYS is not a crossbeat setting and is ignored"
        " (did you mean CROSSBEAT_SECRET_KEY?)",
    ]
    assert "crossbeat topology [OPTIONS]" in result.stdout


@pytest.mark.parametrize("content", ["not json", '{"access_key": "a"}', '{"access_key": null, "secret_key": null}'])
def test_damaged_root_credentials(tmp_path: Path, content: str) -> None:
    """Not JSON was an error not naming the file, a missing field a traceback, and null keys
    started a gateway nobody could use."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "root-credentials.json").write_text(content)
    env = {k: v for k, v in ENV.items() if k not in ("CROSSBEAT_ACCESS_KEY", "CROSSBEAT_SECRET_KEY")}
    result = subprocess.run([sys.executable, "-m", "crossbeat", "gateway", "--data-dir", "d",
                             "--listen", "127.0.0.1:0"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert_error(result, "root-credentials.json is unreadable")
