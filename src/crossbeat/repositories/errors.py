"""Errors raised by data repositories (all are `CrossbeatError`s)."""

from __future__ import annotations

from crossbeat.errors import CrossbeatError


class RepositoryError(CrossbeatError):
    """A repository cannot do what was asked (bad input, I/O failure, misconfiguration)."""


class RepositoryUnavailable(RepositoryError):
    """The repository's backend does not answer usefully now (unreachable, timed out, 5xx,
    throttling, or this gateway's queue for it is full): retryable, so S3 clients get 503
    ServiceUnavailable, not 500. The message names the repository and the cause."""


class NoSuchData(RepositoryError):
    """The object is absent, incomplete or locked (a locked manifest counts as absent)."""

    def __init__(self, repository: str, data_key: str, detail: str = "") -> None:
        self.repository = repository
        self.data_key = data_key
        suffix = f": {detail}" if detail else ""
        super().__init__(f"no such object {data_key!r} in repository {repository!r}{suffix}")


class CorruptData(RepositoryError):
    """Stored bytes fail verification; raised before any of the bad bytes are handed out."""

    def __init__(self, repository: str, data_key: str, chunk: int | None, detail: str) -> None:
        self.repository = repository
        self.data_key = data_key
        self.chunk = chunk
        where = f" chunk {chunk}" if chunk is not None else ""
        super().__init__(
            f"corrupt data in repository {repository!r}: object {data_key!r}{where}: {detail}"
        )
