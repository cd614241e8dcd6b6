"""Reading the gateway's metadata journal over its internal routes (long-poll)."""

from __future__ import annotations

import httpx
import orjson

from crossbeat.errors import CrossbeatError
from crossbeat.populator.auth import SigV4HttpxAuth, quote_query
from crossbeat.populator.entry import JournalEntry

JOURNAL_PATH = "/_/crossbeat/journal"


class JournalError(CrossbeatError):
    """The gateway answered a journal request with an unexpected status."""


class JournalRefused(JournalError):
    """The gateway refused our credentials: no retry can succeed until they are fixed."""


# S3 error codes that say the credentials (not the gateway's state) are wrong
_CREDENTIAL_ERRORS = (b"<Code>AccessDenied</Code>", b"<Code>InvalidAccessKeyId</Code>",
                      b"<Code>SignatureDoesNotMatch</Code>", b"<Code>AuthorizationHeaderMalformed</Code>")


def _refused(resp: httpx.Response) -> None:
    if resp.status_code in (400, 401, 403) and any(code in resp.content for code in _CREDENTIAL_ERRORS):
        raise JournalRefused(
            f"the gateway refused the populator's credentials (HTTP {resp.status_code}): set "
            f"CROSSBEAT_ACCESS_KEY / CROSSBEAT_SECRET_KEY to the gateway's admin pair; {resp.text[:200]}"
        )


class JournalAhead(JournalError):
    """Our checkpoint is past the gateway's last entry: it keeps another journal (its data
    dir was replaced, or this is another gateway). No retry can fix that."""

    def __init__(self, after: int, last_seq: int) -> None:
        super().__init__(
            f"checkpoint seq {after} is beyond the gateway journal's last entry ({last_seq}): "
            "the gateway's metadata is not the one this populator followed"
        )
        self.after = after
        self.last_seq = last_seq


class TruncatedJournal(JournalError):
    """Entries after the requested seq were dropped by retention: a gap we cannot fill."""

    def __init__(self, after: int, first_available: int) -> None:
        super().__init__(
            f"journal truncated: asked for entries after {after}, the gateway keeps only "
            f"{first_available} onwards"
        )
        self.after = after
        self.first_available = first_available


class JournalClient:
    """A synchronous client of `GET /_/crossbeat/journal` and its checkpoint route."""

    def __init__(self, endpoint: str, auth: SigV4HttpxAuth, *, timeout: float = 30.0) -> None:
        self._client = httpx.Client(base_url=endpoint.rstrip("/"), auth=auth, timeout=timeout)

    def read(self, after: int, limit: int, wait: float = 0.0) -> list[JournalEntry]:
        """Entries with seq > `after`, at most `limit`, waiting up to `wait` s for the first.

        Raises TruncatedJournal when retention has dropped entries we have not seen, and
        JournalError if the entries are not dense from `after + 1` (the contract says they
        are; a gap here would silently lose changes).
        """
        entries = [JournalEntry.from_json(orjson.loads(line)) for line in self.read_lines(after, limit, wait)]
        expected = after + 1
        for entry in entries:
            if entry.seq != expected:
                raise JournalError(f"journal gap: expected seq {expected}, got {entry.seq}")
            expected += 1
        return entries

    def read_lines(self, after: int, limit: int, wait: float = 0.0) -> list[bytes]:
        """The same entries as `read`, as their undecoded JSON lines (one object each, in
        seq order; density not checked): for an observer that looks only at a few of them
        and would rather not decode the rest. Raises as `read` does."""
        params: dict[str, str | int | float] = {"after": after, "limit": limit}
        if wait > 0:
            params["wait"] = wait
        resp = self._client.get(
            f"{JOURNAL_PATH}?{quote_query(params)}", timeout=max(30.0, wait + 30.0)
        )
        if resp.status_code == 410:
            body = resp.json()
            raise TruncatedJournal(after, int(body.get("firstAvailable", -1)))
        if resp.status_code == 409 and resp.json().get("error") == "AheadOfJournal":
            raise JournalAhead(after, int(resp.json().get("lastSeq", -1)))
        _refused(resp)
        if resp.status_code != 200:
            raise JournalError(f"journal read failed: HTTP {resp.status_code}: {resp.text[:300]}")
        return [line for line in resp.content.splitlines() if line.strip()]

    def checkpoint(self, consumer: str, seq: int) -> None:
        """Tell the gateway `consumer` has durably handled every entry up to `seq`."""
        query = quote_query({"consumer": consumer, "seq": seq})
        resp = self._client.post(f"{JOURNAL_PATH}/checkpoint?{query}")
        _refused(resp)
        if resp.status_code not in (200, 204):
            raise JournalError(f"journal checkpoint failed: HTTP {resp.status_code}: {resp.text}")

    def close(self) -> None:
        self._client.close()
