"""`open_repositories`: the configured repositories, opened and ready by name."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

from crossbeat.repositories.base import Repository
from crossbeat.repositories.errors import RepositoryError
from crossbeat.repositories.proxy import ProxyRepository
from crossbeat.repositories.settings import RepositorySettings
from crossbeat.repositories.sfs import SfsRepository

DEFAULT_REPOSITORY = "default"
# The data dir's id, which s3 repositories' ownership markers name (see s3.py)
OWNER_ID_FILE = "repository-owner-id"


def open_repositories(
    configs: dict[str, RepositorySettings], data_dir: str | Path
) -> dict[str, Repository]:
    """Open every configured repository; return them by name.

    With no configuration, one sfs repository named "default" lives in
    `{data_dir}/repositories/default`. An sfs root that is relative (or unset) is under
    `data_dir`. A proxy's backend names resolve to the proxy itself (seed 003: an enabled
    proxy takes precedence over the repositories it bundles), so locations naming a backend
    are served through the proxy while it exists; the raw backends stay reachable as
    `proxy.backends`. A backend may belong to one proxy only, and a proxy cannot bundle a
    proxy, and sfs roots may not overlap. Bad configuration raises `RepositoryError` and opens nothing.
    Opening does no I/O on remote backends: an s3 repository checks its ownership marker
    (as this data dir's, see `data_dir_id`) on first use.
    """
    data_dir = Path(data_dir)
    if not configs:
        configs = {DEFAULT_REPOSITORY: RepositorySettings(type="sfs")}
    _check_proxies(configs)
    _check_sfs_roots(configs, data_dir)
    opened: dict[str, Repository] = {}
    try:
        for name, settings in configs.items():
            if settings.type == "sfs":
                opened[name] = _open_sfs(name, settings, data_dir)
            elif settings.type == "s3":
                opened[name] = _open_s3(name, settings, data_dir_id(data_dir))
        result = dict(opened)
        for name, settings in configs.items():
            if settings.type == "proxy":
                backends = {b: opened[b] for b in settings.backends}
                assert settings.preferred_backend is not None  # checked by the settings model
                proxy = ProxyRepository(name, backends, settings.preferred_backend)
                result[name] = proxy
                for backend in backends:
                    result[backend] = proxy
    except BaseException:
        for repo in opened.values():
            repo.close()
        raise
    return result


def names_by_repository(repositories: dict[str, Repository]) -> list[tuple[Repository, list[str]]]:
    """Each distinct repository once, with every name that resolves to it."""
    grouped: dict[int, tuple[Repository, list[str]]] = {}
    for name, repo in repositories.items():
        grouped.setdefault(id(repo), (repo, []))[1].append(name)
    return list(grouped.values())


def cleanup_repositories(
    repositories: dict[str, Repository],
    referenced: Callable[[str, str], bool],
    older_than_s: float = 3600,
) -> list[str]:
    """Run `cleanup` once per distinct repository; return the removed ids.

    `referenced(location_name, data_key)` says whether metadata points at the data. Use this
    rather than calling `cleanup` per name: with a proxy several names resolve to one
    repository, and an object is in use if a location under *any* of them points at it.
    """
    removed: list[str] = []
    for repo, names in names_by_repository(repositories):

        def in_use(key: str, names: list[str] = names) -> bool:
            return any(referenced(n, key) for n in names)

        removed += repo.cleanup(in_use, older_than_s)
    return removed


def _check_proxies(configs: dict[str, RepositorySettings]) -> None:
    claimed: dict[str, str] = {}
    for name, settings in configs.items():
        if settings.type != "proxy":
            continue
        for backend in settings.backends:
            target = configs.get(backend)
            if target is None:
                raise RepositoryError(f"proxy {name!r}: backend {backend!r} is not configured")
            if target.type == "proxy":
                raise RepositoryError(f"proxy {name!r}: backend {backend!r} is itself a proxy")
            if backend in claimed:
                raise RepositoryError(
                    f"repository {backend!r} is a backend of both {claimed[backend]!r} and {name!r}"
                )
            claimed[backend] = name


def _sfs_root(name: str, settings: RepositorySettings, data_dir: Path) -> Path:
    root = settings.root if settings.root is not None else Path("repositories") / name
    return (data_dir / root).absolute()  # an absolute root stays as it is


def _check_sfs_roots(configs: dict[str, RepositorySettings], data_dir: Path) -> None:
    """Two repositories in one root would clean up (delete) each other's objects."""
    roots: dict[Path, str] = {}
    for name, settings in configs.items():
        if settings.type != "sfs":
            continue
        root = _sfs_root(name, settings, data_dir)
        for other_root, other in roots.items():
            if root == other_root or root in other_root.parents or other_root in root.parents:
                raise RepositoryError(
                    f"sfs repositories {other!r} and {name!r} overlap ({other_root}, {root})"
                )
        roots[root] = name


def _open_sfs(name: str, settings: RepositorySettings, data_dir: Path) -> Repository:
    return SfsRepository(
        name,
        _sfs_root(name, settings, data_dir),
        chunk_size=settings.chunk_size,
        siphash_key=settings.siphash_key_bytes,
        prepared_objects=settings.prepared_objects,
    )


def _open_s3(name: str, settings: RepositorySettings, owner: str) -> Repository:
    from crossbeat.repositories.s3 import S3Repository  # boto3 is slow to import

    return S3Repository.from_settings(name, settings, owner=owner)


def data_dir_id(data_dir: Path) -> str:
    """This data dir's id (made, durably, on first call): what remote repositories'
    ownership markers name. A copy of the data dir (a restored backup) keeps it, and with
    it the repositories its metadata points into."""
    path = data_dir / OWNER_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{OWNER_ID_FILE}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(uuid.uuid4().hex + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # never replaces one another process made meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path.read_text().strip()
