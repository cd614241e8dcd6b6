"""The gateway: shared state (store, repositories, principals, worker threads) and the ASGI
entry point. S3Error becomes the S3 XML error body here and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from crossbeat.metadata import Bucket, MetadataStore, open_store
from crossbeat.metadata.errors import NoSuchBucket as MetadataNoSuchBucket
from crossbeat.metadata.errors import NoSuchUpload as MetadataNoSuchUpload
from crossbeat.metadata.errors import StoreUnavailable
from crossbeat.metadata.settings import MetadataSettings
from crossbeat.repositories import (
    CorruptData,
    NoSuchData,
    Repository,
    RepositoryError,
    open_repositories,
)
from crossbeat.repositories.errors import RepositoryUnavailable
from crossbeat.repositories.registry import cleanup_repositories, names_by_repository
from crossbeat.repositories.settings import RepositorySettings
from crossbeat.s3 import cors, postobject, router
from crossbeat.s3.auth import Principal, authenticate
from crossbeat.s3.buckets import BUCKET_RE
from crossbeat.s3.errors import S3Error, resource_error
from crossbeat.s3.http import Receive, Request, Response, Scope, Send
from crossbeat.s3.put_batcher import PutBatcher
from crossbeat.s3.settings import GatewaySettings
from crossbeat.s3.xmldoc import error_xml

log = logging.getLogger("crossbeat.gateway")
# How stale the bucket configurations that object requests apply may be (lifecycle rules
# behind x-amz-expiration, CORS rules; see recent_bucket), and how many buckets a process
# keeps (preflights are unauthenticated: names are bounded by BUCKET_RE, their number by this)
RECENT_BUCKET_TTL_S = 1.0
BUCKET_CACHE_TTL_S = 10.0
RECENT_BUCKET_ENTRIES = 4096
# How long a start waits for the first pass over remote repositories (ownership check and
# cleanup) before serving without it; the pass goes on in the background, and is tried
# again, backing off up to REMOTE_RETRY_MAX_S, while their backends do not answer.
REMOTE_START_WAIT_S = 5.0
REMOTE_RETRY_MAX_S = 60.0
# Objects a background cleanup may take for leftovers were written this long before the
# start, at least: the pass runs beside requests writing new objects (whose metadata is not
# committed yet), and the backend's clock may be ahead of ours.
REMOTE_CLEANUP_MARGIN_S = 300.0
T = TypeVar("T")


def is_remote(repo: Repository) -> bool:
    """Whether `repo`'s I/O may hang on a backend (it has threads of its own for it)."""
    return repo.io_executor is not None


def _utf8(text: str) -> bool:
    """Whether `text` came from valid UTF-8 (the path is decoded with surrogateescape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(raw_path: bytes) -> str:
    """A request path for the log, as sent (percent-encoded), without Python's b'...'."""
    return raw_path.decode("latin-1")


class Gateway:
    """One S3 site: a metadata store, named data repositories and the users allowed in."""

    def __init__(
        self,
        settings: GatewaySettings,
        store: MetadataStore,
        repositories: dict[str, Repository],
        principals: dict[str, Principal],
    ) -> None:
        self.settings = settings
        self.store = store
        self.repositories = repositories
        self.principals = principals
        self.executor = ThreadPoolExecutor(settings.worker_threads, thread_name_prefix="s3")
        # Journal long-polls park a thread each for up to 30 s: they get their own pool so
        # that waiting consumers never starve S3 requests of worker threads.
        self.poll_executor = ThreadPoolExecutor(64, thread_name_prefix="s3-poll")
        self.closing = False
        # S3 requests this process is handling (from their headers to their response's end):
        # how busy it is, for the small PUTs' group commit
        self.requests_in_flight = 0
        # small PUTs' group commit (threads start on first use, in the serving process)
        self.put_batcher = PutBatcher(self)
        # Buckets by name, for what never changes in a bucket's life: its owner and location:
        # (when read, bucket). A name outlives its bucket, though (deleted, it may be created
        # again by another user, elsewhere), so both caches are dropped whenever the store's
        # buckets generation changes, and an entry is read again after BUCKET_CACHE_TTL_S
        # (a process that died between a bucket change and its bump of the generation).
        # Versioning and configurations may still be stale (a change racing a request):
        # handlers that depend on those ask for `fresh=True` or re-read inside the commit.
        self._buckets: dict[str, tuple[float, Bucket]] = {}
        # Buckets as read at most RECENT_BUCKET_TTL_S ago, for the configurations object
        # requests apply: (when read, bucket or None), see `recent_bucket`.
        self._recent: dict[str, tuple[float, Bucket | None]] = {}
        self._buckets_generation = b""
        self.started = time.time()
        # the background pass over remote repositories (see `_start_remote`)
        self._stopping = threading.Event()
        self._remote_pass: threading.Thread | None = None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def open(cls, settings: GatewaySettings, principals: dict[str, Principal]) -> Gateway:
        # absolute: the default repository's root is made from it and then resolved against
        # it again, which put a relative --data-dir's objects in DIR/DIR/sfs
        data_dir = Path(settings.data_dir).absolute()
        data_dir.mkdir(parents=True, exist_ok=True)
        store = open_store(
            data_dir / "metadata.sqlite",
            MetadataSettings(
                journal_retention_entries=settings.journal_retention_entries,
                journal_retention_seconds=settings.journal_retention_seconds,
                journal_poll_seconds=settings.journal_poll_seconds,
            ),
        )
        repo_cfg: dict[str, RepositorySettings] = {
            name: RepositorySettings.model_validate(cfg) for name, cfg in settings.repositories.items()
        }
        if settings.default_location not in repo_cfg:
            repo_cfg[settings.default_location] = RepositorySettings.model_validate(
                {"type": "sfs", "root": str(data_dir / "sfs"), "chunk_size": settings.chunk_size}
            )
        repositories = open_repositories(repo_cfg, data_dir)
        gw = cls(settings, store, repositories, principals)
        # Remote repositories first, in the background: one that does not answer must not
        # hold the start (a hung listing held it for minutes, then ended it).
        gw._start_remote(clean=settings.cleanup_on_start)
        if settings.cleanup_on_start:
            removed = gw.cleanup(remote=False)
            if removed:
                log.info("cleanup removed %d leftover object directories (incomplete writes, "
                         "unused prepared ones, unreferenced objects)", len(removed))
        return gw

    def _start_remote(self, clean: bool) -> None:
        """Check the remote repositories (their ownership markers, see repositories/s3.py)
        and, with `clean`, run their cleanup pass, on a thread of its own; wait for it up to
        REMOTE_START_WAIT_S, so that working backends are done with before serving as
        before. A backend that does not answer is tried again, backing off, until it does
        (its buckets' requests get 503 meanwhile, each bounded by the repository's
        timeouts); a repository that must not be used (another gateway's) is logged and
        refused. The pass stops at `close`, an unfinished cleanup waiting for the next start."""
        remote = [repo for repo, _ in names_by_repository(self.repositories) if is_remote(repo)]
        if not remote:
            return
        self._remote_pass = threading.Thread(
            target=self._remote_start, args=(clean,), name="repo-start", daemon=True
        )
        self._remote_pass.start()
        self._remote_pass.join(REMOTE_START_WAIT_S)
        if self._remote_pass.is_alive():
            log.warning("remote repositories (%s) not ready after %.0f s: serving, and checking "
                        "them in the background", ", ".join(repr(r.name) for r in remote), REMOTE_START_WAIT_S)

    def _remote_start(self, clean: bool) -> None:
        delay = 1.0
        while not self._stopping.is_set():
            try:
                if clean:
                    # written before this start (with a margin), so not a request's in flight
                    older = time.time() - self.started + REMOTE_CLEANUP_MARGIN_S
                    removed = self.cleanup(older_than_s=older, remote=True)
                    if removed:
                        log.info("cleanup removed %d leftover objects from remote repositories", len(removed))
                else:
                    for repo, _ in names_by_repository(self.repositories):
                        if is_remote(repo):
                            next(iter(repo.keys()), None)  # (checks the ownership marker)
                return
            except RepositoryUnavailable as exc:
                log.warning("remote repository start-up pass: %s; trying again in %.0f s", exc, delay)
            except Exception as exc:  # noqa: BLE001 - a background thread: said, not raised
                log.error("remote repository start-up pass stopped: %s", exc)
                return
            if self._stopping.wait(delay):
                break
            delay = min(2 * delay, REMOTE_RETRY_MAX_S)
        log.warning("remote repositories' start-up pass did not finish before the stop: it "
                    "runs again at the next start")

    def close(self) -> None:
        self.closing = True  # long-polls notice within a second (see internal.wait_journal)
        self._stopping.set()
        if self._remote_pass is not None:
            self._remote_pass.join(1.0)  # (a call in flight ends within its timeouts)
        self.put_batcher.close()
        self.executor.shutdown(wait=True)
        self.poll_executor.shutdown(wait=True, cancel_futures=True)
        self.store.close()
        for repo, _names in names_by_repository(self.repositories):
            repo.close()  # stops helpers (sfs_prepared) and clients

    # -- helpers for handlers -----------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (file I/O, SQLite) on the gateway's worker threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, partial(fn, *args, **kwargs))

    async def run_io(self, repo: Repository | None, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking work on `repo`'s own threads if it has some (a remote backend, which
        may hang: see repositories/io.py), else as `run`. Its queue full is
        `RepositoryUnavailable` (503) at once."""
        executor = repo.io_executor if repo is not None else None
        if executor is None:
            return await self.run(fn, *args)
        return await asyncio.wrap_future(executor.submit(fn, *args))

    async def run_wait(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a long blocking wait (journal long-poll) on the dedicated polling threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.poll_executor, partial(fn, *args))

    def repository(self, name: str) -> Repository:
        repo = self.repositories.get(name)
        if repo is None:
            raise S3Error("InternalError", f"unknown data location {name!r}")
        return repo

    def location_for(self, bucket: Bucket) -> Repository:
        return self.repository(bucket.location or self.settings.default_location)

    def location_name(self, constraint: str | None) -> str:
        """The repository a LocationConstraint selects (the region name selects the default)."""
        if not constraint or constraint in (self.settings.region, "us-east-1", "EU"):
            return self.settings.default_location
        if constraint in self.repositories:
            return constraint
        raise S3Error("InvalidLocationConstraint", f"unknown location constraint {constraint!r}")

    def forget_bucket(self, name: str) -> None:
        """Drop a bucket from the cache after it changed."""
        self._buckets.pop(name, None)
        self._recent.pop(name, None)

    def _check_buckets_generation(self) -> None:
        """Drop every cached bucket once any process changed a bucket."""
        generation = self.store.buckets_generation()
        if generation != self._buckets_generation:
            self._buckets.clear()
            self._recent.clear()
            self._buckets_generation = generation

    def recent_bucket(self, name: str) -> Bucket | None:
        """Bucket `name` (None if there is none) as read at most RECENT_BUCKET_TTL_S ago,
        for the configurations object requests apply (lifecycle rules, CORS rules): another
        gateway process may change them, and reading the bucket on every request would cost
        each a query, so a change made elsewhere applies here within that TTL (at once for
        changes made through this process, which drop the entry). A name no bucket can have
        is answered without a query or an entry. Reads on the calling thread, the event
        loop, as GET's own metadata read does: one small query per bucket and interval."""
        self._check_buckets_generation()
        now = time.monotonic()
        entry = self._recent.get(name)
        if entry is None or now - entry[0] > RECENT_BUCKET_TTL_S:
            # the name is checked only on a miss: every PUT, GET and HEAD comes through here
            if not BUCKET_RE.match(name):
                return None
            entry = (now, self.store.get_bucket(name))
            if len(self._recent) >= RECENT_BUCKET_ENTRIES and name not in self._recent:
                # many buckets, or a client probing names: keep what is fresh, else start over
                self._recent = {k: v for k, v in self._recent.items() if now - v[0] <= RECENT_BUCKET_TTL_S}
                if len(self._recent) >= RECENT_BUCKET_ENTRIES:
                    self._recent.clear()
            self._recent[name] = entry
        return entry[1]

    def lifecycle_of(self, name: str) -> dict[str, Any] | None:
        """The bucket's lifecycle configuration, for x-amz-expiration (see recent_bucket)."""
        bucket = self.recent_bucket(name)
        return bucket.lifecycle if bucket is not None else None

    def cors_of(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(whether bucket `name` exists, its CORS configuration or None), for preflights
        and requests carrying an Origin (see recent_bucket)."""
        bucket = self.recent_bucket(name)
        return bucket is not None, bucket.cors if bucket is not None else None

    async def bucket(self, name: str, principal: Principal, fresh: bool = False) -> Bucket:
        """The bucket if it exists and `principal` owns it; S3 errors otherwise.

        Without `fresh` the answer may come from the cache: right for its owner and
        location (the cache goes when any bucket changes), possibly stale for versioning
        and configurations changed by a request racing this one.
        """
        self._check_buckets_generation()
        generation = self._buckets_generation
        entry = None if fresh else self._buckets.get(name)
        now = time.monotonic()
        if entry is not None and now - entry[0] <= BUCKET_CACHE_TTL_S:
            bucket: Bucket | None = entry[1]
        else:
            bucket = await self.run(self.store.get_bucket, name)
            # cached only if no bucket changed while the worker read it: a read from before
            # a delete and a re-creation, cached after another request saw the new
            # generation, let the former owner in until the entry expired
            if bucket is not None and self.store.buckets_generation() == generation:
                self._buckets[name] = (now, bucket)
        if bucket is None:
            raise S3Error("NoSuchBucket", resource=f"/{name}", extra={"BucketName": name})
        if bucket.owner != principal.access_key:
            raise S3Error("AccessDenied", resource=f"/{name}")
        return bucket

    def free_now(self, metas: list[dict[str, Any]]) -> None:
        """Delete the data of versions or parts that no metadata points at any more. A part's
        data freed is then forgotten from the store's `pending_frees` (where dropping it
        recorded it: see metadata/uploads.intend_free), unless its meta says
        `"pendingFree": False` (a part no transaction recorded)."""
        freed_parts: list[str] = []
        failed: list[tuple[str, str]] = []
        for meta in metas:
            for loc in meta.get("location") or []:
                repo = self.repositories.get(loc.get("location", ""))
                if repo is None:
                    continue
                try:
                    repo.delete(loc["dataKey"])
                except Exception:  # noqa: BLE001 - recorded below for the cleanup pass
                    log.exception("could not delete data %s", loc)
                    failed.append((loc["location"], loc["dataKey"]))
                    continue
                if "partNumber" in meta and meta.get("pendingFree", True):
                    freed_parts.append(loc["dataKey"])
        self._free_later(failed)
        if freed_parts:
            try:
                self.store.forget_frees(freed_parts)
            except Exception as exc:  # noqa: BLE001 - the next cleanup frees them again: harmless
                log.warning("could not record %d freed parts as freed: %s", len(freed_parts), exc)

    async def free(self, metas: list[dict[str, Any]]) -> None:
        if any(m.get("location") for m in metas):
            remote = next((repo for m in metas for loc in m.get("location") or []
                           if (repo := self.repositories.get(loc.get("location", ""))) is not None
                           and is_remote(repo)), None)  # fmt: skip
            try:
                await self.run_io(remote, self.free_now, metas)
            except RepositoryUnavailable as exc:  # its queue is full: the metadata is gone already
                log.warning("could not free the data of %d versions now (%s): left for the "
                            "cleanup pass", len(metas), exc)
                await self.run(self._free_later, [(loc["location"], loc["dataKey"]) for m in metas
                                                  for loc in m.get("location") or []])

    def _free_later(self, locations: list[tuple[str, str]]) -> None:
        """Record data that could not be deleted now in the store's `pending_frees`: the
        cleanup pass frees it whatever its bound on orphans (a backend down for a while
        leaves many), unless some location names it again by then."""
        if not locations:
            return
        try:
            self.store.intend_frees(locations)
        except Exception as exc:  # noqa: BLE001 - left to the cleanup pass's orphan search
            log.warning("could not record %d data to free later: %s", len(locations), exc)

    def versions(self, bucket: str) -> Iterator[dict[str, Any]]:
        """Every version and delete marker of `bucket`, page by page (worker thread)."""
        key_marker, version_marker = "", ""
        while True:
            page = self.store.list_versions(
                bucket, key_marker=key_marker, version_marker=version_marker, limit=1000
            )
            yield from page
            if len(page) < 1000:
                return
            key_marker, version_marker = page[-1]["key"], page[-1]["versionId"]

    def referenced_keys(self) -> set[tuple[str, str]]:
        """Every (location, dataKey) that a version or an upload part points at.

        Safe while requests are served (the remote repositories' cleanup runs then): data
        only ever moves from an upload's parts to a version (CompleteMultipartUpload, one
        transaction), so each bucket's parts are read before its versions. Read the other
        way, a Complete committed between the two reads hid its parts from both, and their
        data was deleted as leftovers (found by an adversarial review). Data written after
        the walk began is the caller's age margin's to spare."""
        refs: set[tuple[str, str]] = set()

        def add(meta: dict[str, Any]) -> None:
            for loc in meta.get("location") or []:
                refs.add((loc["location"], loc["dataKey"]))

        for bucket in self.store.list_buckets():
            key_marker, upload_marker = "", ""
            while True:
                uploads = self.store.list_uploads(
                    bucket.name, key_marker=key_marker, upload_id_marker=upload_marker, limit=1000
                )
                for upload in uploads:
                    marker = 0
                    while True:
                        parts = self.store.list_parts(upload["uploadId"], marker=marker, limit=1000)
                        for part in parts:
                            add(part)
                        if len(parts) < 1000:
                            break
                        marker = parts[-1]["partNumber"]
                if len(uploads) < 1000:
                    break
                key_marker, upload_marker = uploads[-1]["key"], uploads[-1]["uploadId"]
            for meta in self.versions(bucket.name):  # after the parts: see above
                add(meta)
        return refs

    def cleanup(self, older_than_s: float = 0.0, *, remote: bool | None = None) -> list[str]:
        """Remove half-written and unreferenced data (run when no request is in flight, or
        with an `older_than_s` that spares what requests in flight write).

        `remote` False cleans the local repositories only, True the remote ones only (see
        `is_remote`: at start they are cleaned in the background), None all of them. Of a
        remote repository that holds nothing while metadata names objects in it, the
        cleanup is skipped and that logged, rather than stopping a gateway that serves.

        Metadata that names no data at all while a repository holds objects is taken for a
        lost or replaced metadata store (a deleted or emptied database, a bad restore), not
        for a store whose every object is an orphan: nothing is removed and that is logged.
        Each repository also keeps its unreferenced objects when they are too many for a
        crash's leftovers (`repositories.base.orphans_plausible`); the parts' data the store
        records as dropped and not yet freed goes first, whatever their number.

        An object is in use when any location names its objectId, whichever repository the
        location names: objectIds are unique across repositories, and a location may name
        another one than the repository holding the data. A migration moves data between the
        backends of a proxy and leaves the locations naming the old backend; once the proxy
        (or the old backend) is taken out of the configuration, matching by name took every
        migrated object for an orphan and deleted it.
        """
        refs = self.referenced_keys()
        in_use = {key for _, key in refs}
        chosen = {name: repo for name, repo in self.repositories.items()
                  if remote is None or is_remote(repo) == remote}  # fmt: skip
        removed = self._free_pending(in_use, chosen)
        unconfigured = Counter(name for name, _ in refs if name not in self.repositories)
        if unconfigured and remote is not True:
            log.error(
                "the metadata names objects in repositories that are not configured (%s): they "
                "read as errors until those are configured again. Data a migration moved to "
                "another repository is kept; a proxy with both as backends serves it.",
                ", ".join(f"{name!r}: {n}" for name, n in sorted(unconfigured.items())))
        holding = False  # whether some repository holds an object (one listing each)
        for repo, names in names_by_repository(chosen):
            holds = next(iter(repo.keys()), None) is not None
            holding = holding or holds
            named = 0 if holds else sum(1 for name, _ in refs if name in names)
            if named and is_remote(repo) and remote:
                log.error("cleanup: the metadata names %d objects in repository %r, whose "
                          "bucket holds none: is it the right bucket and prefix? Not cleaning "
                          "it", named, repo.name)
                chosen = {n: r for n, r in chosen.items() if r is not repo}
            elif named:
                raise RepositoryError(
                    f"the metadata names {named} objects in repository {repo.name!r}, which "
                    "holds none: is its directory missing or moved? Not starting"
                )
        if not refs and holding:
            log.error("cleanup: the metadata store names no data, yet the repositories hold "
                      "objects: removing nothing. If the metadata was lost, restore it.")
            return removed
        # one pass per distinct repository: with a proxy several names share one repository
        return removed + cleanup_repositories(
            chosen, lambda _name, key: key in in_use, older_than_s=older_than_s
        )

    def _free_pending(self, in_use: set[str], repositories: dict[str, Repository]) -> list[str]:
        """Free the parts' data the store records as dropped and not yet freed (a crash came
        between an abort, a DeleteBucket or a Complete and its freeing), whatever the cleanup
        pass's bound on orphans: the store says they are garbage, one by one. Data some
        location still names is kept (and forgotten all the same)."""
        pending = self.store.pending_frees()
        removed: list[str] = []
        forget: list[str] = []
        for name, key in pending:
            repo = repositories.get(name)
            if name not in repositories and name in self.repositories:
                continue  # the other pass's (local or remote)
            if key in in_use:
                forget.append(key)
            elif repo is not None:
                try:
                    repo.delete(key)
                except Exception as exc:  # noqa: BLE001 - kept pending: tried again next time
                    log.warning("cleanup: could not free part data %s/%s: %s", name, key, exc)
                    continue
                removed.append(key)
                forget.append(key)
            # (a repository no longer configured: kept pending until it is again)
        self.store.forget_frees(forget)
        if removed:
            log.info("cleanup freed %d parts' data that aborts, bucket deletions or completes "
                     "had dropped before a stop", len(removed))
        return removed

    # -- ASGI ---------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self.requests_in_flight += 1
        try:
            await self._handle(scope, receive, send)
        finally:
            self.requests_in_flight -= 1

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        req = Request.from_scope(scope, receive, self.settings.virtual_host_domains)
        head_only = req.method == "HEAD"
        # CORS costs a request without Origin (nearly all) this one lookup; see s3/cors.py
        origin = req.headers.get("origin")
        try:
            if not _utf8(req.bucket) or not _utf8(req.key):
                # percent-escapes that are not UTF-8 (%FF): no S3 name can hold them. Found
                # only when the metadata store refused the key, after a PUT's body was read:
                # a 500 with a traceback, which clients retry.
                raise S3Error("InvalidURI")
            if req.method == "OPTIONS":
                # a CORS preflight: no S3 API uses OPTIONS, and browsers send no credentials
                response = await cors.preflight(self, req)
            elif req.method == "POST" and not req.key and req.bucket and router.SUBRESOURCES.isdisjoint(req.query):
                # POST Object (an HTML form upload) carries its credentials in the form
                response = await postobject.post_object(self, req)
            else:
                principal, ctx = self.authenticate(req)
                if ctx.auth_type == "v4-query":
                    hoist_query_headers(req)
                response = await router.dispatch(self, req, principal, ctx)
        except S3Error as err:
            response = self.error_response(err, req)
        except MetadataNoSuchBucket as exc:
            # the bucket went between the handler's lookup (which another worker process's
            # DeleteBucket does not refresh) and its write: what the lookup would now say
            response = self.error_response(S3Error("NoSuchBucket", extra={"BucketName": exc.bucket}), req)
        except MetadataNoSuchUpload:
            response = self.error_response(S3Error("NoSuchUpload"), req)
        except StoreUnavailable as exc:  # the operator's to fix: said once per request, no traceback
            log.error("%s %s refused: %s", req.method, _shown(req.raw_path), exc)
            response = self.error_response(S3Error("ServiceUnavailable"), req)
        except RepositoryUnavailable as exc:
            # a backend down, overloaded or hung: retryable (every SDK retries a 503), and
            # the detail is the log's, not the client's
            log.warning("%s %s: %s", req.method, _shown(req.raw_path), exc)
            response = self.error_response(S3Error("ServiceUnavailable"), req)
        except (CorruptData, NoSuchData) as exc:
            log.error("data error on %s %s: %s", req.method, _shown(req.raw_path), exc)
            response = self.error_response(S3Error("InternalError", f"stored data is unreadable: {exc}"), req)
        except ConnectionError:
            return
        except Exception as exc:
            wanting = resource_error(exc)
            if wanting is not None:  # the machine's state, not a bug: no traceback
                log.warning("%s on %s %s: %s", wanting.code, req.method, _shown(req.raw_path), exc)
                response = self.error_response(wanting, req)
            elif isinstance(exc, RepositoryError):
                # a file the repository cannot use (EIO, EACCES...): said, not a traceback
                log.error("data error on %s %s: %s", req.method, _shown(req.raw_path), exc)
                response = self.error_response(S3Error("InternalError"), req)
            else:
                log.exception("internal error on %s %s", req.method, _shown(req.raw_path))
                response = self.error_response(S3Error("InternalError"), req)
        if response.status >= 300 and not req.body_done and req.has_body:
            # An unread body (e.g. refused before `Expect: 100-continue` was answered) would be
            # parsed as the next request: drain a small one, else close the connection.
            try:
                drained = await req.discard_body()
            except Exception:  # noqa: BLE001 - any failure here means: close
                drained = False
            if not drained:
                response.headers["connection"] = "close"
        if origin is not None and req.method != "OPTIONS":
            await cors.add_headers(self, req, origin, response)
        await response.send(send, req, head_only=head_only)

    def authenticate(self, req: Request) -> tuple[Principal, Any]:
        ctx = authenticate(
            req.method, req.raw_path, req.query_string, req.raw_headers, self.principals.get,
            header_map=req.header_map,
            v2_path=b"/" + req.bucket.encode("utf-8", "surrogateescape") + req.raw_path
            if req.virtual_host else None,
        )
        if ctx.principal is None:
            raise S3Error("AccessDenied", "Anonymous access is not allowed.")
        return ctx.principal, ctx

    def error_response(self, err: S3Error, req: Request) -> Response:
        resource = err.resource or req.raw_path.decode("latin-1")
        if not err.resource:
            err.resource = resource
        headers = {"content-type": "application/xml"}
        headers.update(err.headers)
        if err.status == 304:
            return Response(status=304, headers={k: v for k, v in headers.items() if k != "content-type"})
        body = error_xml(err, req.request_id)
        return Response(status=err.status, headers=headers, body=body)


# A presigned URL's own parameters (its signature), never request headers.
_V4_QUERY_AUTH = frozenset({
    "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires",
    "x-amz-signedheaders", "x-amz-signature", "x-amz-security-token", "x-amz-content-sha256",
})
# Left alone, as S3 does ("presigned URLs don't support ... CRC32, CRC32C, SHA-1, SHA-256"
# on upload, its user guide says): the JS SDK v3 presigns a PutObject with the CRC32 of
# its empty body (x-amz-checksum-crc32=AAAAAA==), which no real upload would match.
_V4_QUERY_IGNORED = re.compile(r"x-amz-(checksum-(?!mode$).*|sdk-checksum-algorithm)")


def hoist_query_headers(req: Request) -> None:
    """Take the `x-amz-*` query parameters of a SigV4 presigned request as the headers they
    stand for, where no header of the name is given: the JS SDK v3 presigner moves every
    x-amz-* header it signs into the query (x-amz-meta-*, x-amz-tagging, x-amz-acl,
    x-amz-copy-source, ...), and S3 applies them. The signature covers them. Ignored, a
    presigned PUT lost its metadata, and a presigned copy stored an empty object."""
    for name, value in req.query.items():
        lower = name.lower()
        if (not lower.startswith("x-amz-") or lower in _V4_QUERY_AUTH
                or _V4_QUERY_IGNORED.fullmatch(lower) or lower in req.headers):
            continue
        value = value.encode("utf-8").decode("latin-1")  # as a header's bytes are held
        req.headers[lower] = value
        req.header_map[lower] = [value]


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
