"""Who may call the gateway: the root (admin) pair and the configured users."""

from __future__ import annotations

import json
import os
import secrets
import string
from pathlib import Path

from crossbeat.errors import ConfigError, CrossbeatError
from crossbeat.s3.auth import Principal
from crossbeat.s3.settings import GatewaySettings

ROOT_FILE = "root-credentials.json"


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def root_principal(settings: GatewaySettings) -> tuple[Principal, bool]:
    """The root pair: from settings (env), else the one stored in the data dir, else a new one.

    Returns (principal, generated) where generated tells the caller to print it once.
    """
    if settings.access_key and settings.secret_key:
        return (
            Principal(settings.access_key, settings.secret_key.get_secret_value(), "root", True),
            False,
        )
    path = Path(settings.data_dir) / ROOT_FILE
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            ak, sk = doc["access_key"], doc["secret_key"]
            if not (isinstance(ak, str) and ak and isinstance(sk, str) and sk):
                raise ValueError("access_key and secret_key must be non-empty strings")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CrossbeatError(
                f"{path} is unreadable ({exc!r}): restore it, or remove it to have new root "
                "credentials made (or set CROSSBEAT_ACCESS_KEY / CROSSBEAT_SECRET_KEY)"
            ) from exc
        return Principal(ak, sk, "root", True), False
    ak = "CB" + _random(string.ascii_uppercase + string.digits, 18)
    sk = _random(string.ascii_letters + string.digits + "+/", 40)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"access_key": ak, "secret_key": sk}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return Principal(ak, sk, "root", True), True


def principals(settings: GatewaySettings, root: Principal) -> dict[str, Principal]:
    """Access key → principal for root and every configured user.

    ConfigError for a user without an access key or secret, or whose access key is root's
    or another user's: the later entry silently replaced the earlier one, and a user with
    root's key took over root's buckets and admin rights (buckets are owned by access key)."""
    table = {root.access_key: root}
    for user in settings.users:
        if not user.access_key or not user.secret_key.get_secret_value():
            raise ConfigError(f"gateway user {user.display_name or user.access_key!r}: "
                              "access_key and secret_key must not be empty")
        if user.access_key in table:
            whose = "the root credentials'" if user.access_key == root.access_key else "another user's"
            raise ConfigError(f"gateway user access key {user.access_key!r} is {whose}: "
                              "each user needs its own")
        table[user.access_key] = Principal(
            user.access_key,
            user.secret_key.get_secret_value(),
            user.display_name or user.access_key,
            False,
        )
    return table
