"""Parse the captured client requests in the shared S3 wire captures.

Each capture file holds one HTTP request: the request line and headers (CRLF), a blank line,
then a textual description of the body: `---- body length N; first 400 bytes repr below ----`
and a Python bytes repr of the head, optionally `---- last 200 bytes ----` and a repr of the
tail. Bodies sent with HTTP chunking first show the raw wire form, then the body "after HTTP
de-chunking (what an ASGI app receives)" — that is the body parsed here.

Long bodies are truncated in the files. `Capture.body` is the exact ASGI body when the file
shows all of it, or when it can be rebuilt: a run of one repeated byte (plain bodies), or an
aws-chunked framing of such a run whose head and tail confirm the layout. Otherwise it is
None (e.g. rclone's random multipart bodies) and only the signature can be checked.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

CAPTURES_ROOT = Path("/work/shared/reference/s3-wire-captures")
CAPTURE_DIRS = ("captures", "captures_tls", "captures_tools")

# access key -> secret the clients signed with
SECRETS = {"boto3": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "tools": "secret"}

_BODY_MARK = re.compile(rb"^---- body length (\d+); first \d+ bytes repr below ----$", re.M)
_TAIL_MARK = b"---- last "


@dataclass
class Capture:
    """One captured request, in the shape an ASGI app sees it."""

    name: str  # e.g. "captures/put_bytes/001"
    method: str
    raw_path: bytes
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body_length: int
    head: bytes
    tail: bytes | None
    body: bytes | None  # exact body, or None when it cannot be rebuilt

    @property
    def secret(self) -> str:
        """The secret key this capture was signed with."""
        return SECRETS["tools"] if self.name.startswith("captures_tools") else SECRETS["boto3"]

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.decode("latin-1").lower() == name.lower():
                return v.decode("latin-1")
        return None

    def header_dict(self) -> dict[str, str]:
        """Lower-case names → values (repeats joined with `,`)."""
        out: dict[str, str] = {}
        for k, v in self.headers:
            name = k.decode("latin-1").lower()
            value = v.decode("latin-1").strip()
            out[name] = f"{out[name]},{value}" if name in out else value
        return out


def parse_capture(path: Path, name: str | None = None) -> Capture:
    data = path.read_bytes()
    head_part, _, rest = data.partition(b"\r\n\r\n")
    lines = head_part.split(b"\r\n")
    method, target, _version = lines[0].split(b" ")
    raw_path, _, query = target.partition(b"?")
    headers = []
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers.append((k.strip(), v.strip()))
    marks = list(_BODY_MARK.finditer(rest))
    mark = marks[-1]  # the de-chunked body when both forms are shown
    length = int(mark.group(1))
    after = rest[mark.end() :].lstrip(b"\r\n")
    head_repr, _, tail_part = after.partition(b"\n" + _TAIL_MARK)
    head = ast.literal_eval(head_repr.strip().decode("ascii"))
    tail = None
    if tail_part:
        tail = ast.literal_eval(tail_part.split(b"\n", 1)[1].strip().decode("ascii"))
    cap = Capture(
        name=name or str(path),
        method=method.decode("ascii"),
        raw_path=raw_path,
        query_string=query,
        headers=headers,
        body_length=length,
        head=head,
        tail=tail,
        body=None,
    )
    cap.body = _rebuild(cap)
    return cap


def _rebuild(cap: Capture) -> bytes | None:
    if len(cap.head) == cap.body_length:
        return cap.head
    if cap.tail is None:
        return None
    candidates: list[bytes] = []
    overlap = len(cap.head) + len(cap.tail) - cap.body_length
    if overlap >= 0:
        candidates.append(cap.head + cap.tail[overlap:])
    if cap.head and cap.head == cap.head[:1] * len(cap.head):
        candidates.append(cap.head[:1] * cap.body_length)
    decoded = cap.header("x-amz-decoded-content-length")
    if decoded is not None and b"\r\n" in cap.head:
        # aws-chunked: "<hex>\r\n" + fill byte; rebuild chunks of that size and the tail's trailer
        size_line, _, first = cap.head.partition(b"\r\n")
        chunk = int(size_line.split(b";")[0], 16)
        fill = first[:1]
        total = int(decoded)
        pieces = []
        for off in range(0, total, chunk):
            n = min(chunk, total - off)
            pieces.append(b"%x\r\n" % n + fill * n + b"\r\n")
        trailer = cap.tail[cap.tail.rfind(b"\r\n0\r\n") + 2 :]
        candidates.append(b"".join(pieces) + trailer)
    for body in candidates:
        if len(body) == cap.body_length and body.startswith(cap.head) and body.endswith(cap.tail):
            return body
    return None


def capture_files(root: Path | None = None) -> list[Path]:
    """Every capture file, in a stable order (empty when the captures are not present)."""
    root = root or CAPTURES_ROOT
    files: list[Path] = []
    for d in CAPTURE_DIRS:
        if (root / d).is_dir():
            files.extend(sorted((root / d).glob("*/*.txt")))
    return files


def load_all(root: Path | None = None) -> list[Capture]:
    """Every capture, named like `captures/put_bytes/001`."""
    root = root or CAPTURES_ROOT
    return [parse_capture(p, str(p.relative_to(root).with_suffix(""))) for p in capture_files(root)]
