"""S3 listings against the real SQLite metadata store, compared with a reference model.

Every paginated listing is walked page by page the way botocore does (V1: NextMarker or the
last key; V2: NextContinuationToken; versions: NextKeyMarker/NextVersionIdMarker), decoding
`encoding-type=url` values with `unquote_plus` as botocore does, and each page must be the
next `max-keys` items of the reference sequence.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus
from xml.etree import ElementTree as ET

import pytest

from crossbeat.metadata import Bucket, MetadataSettings, new_upload_id, new_version_id
from crossbeat.metadata.sqlite import SqliteMetadataStore
from crossbeat.s3 import listing
from crossbeat.s3.errors import S3Error
from crossbeat.s3.xmldoc import NS

N = "{" + NS + "}"
BUCKET = "bkt"

# key -> history oldest first; "D" is a delete marker, "V" a version, "N" the null version
HISTORY: dict[str, str] = {
    "a": "V",
    "a b": "VV",
    "a+b": "V",
    "a/": "V",
    "a/b": "VVV",
    "a/b/c": "V",
    "a/c": "VD",  # deleted: not listed, but its versions are
    "a/d/e": "V",
    "ab": "NV",
    "b//c": "V",
    "b/": "V",
    "c d/e f": "V",
    "dm/only": "D",
    "dm/x": "V",
    "gone/1": "VD",  # every key under gone/ is deleted: no common prefix in object listings
    "gone/2": "D",
    "é": "V",
    "é/1": "VN",
    "é/2": "V",
    "日本/語": "V",
    "日本語": "VV",
    "z+/+": "V",
    "~tilde": "V",
    "\U0001f600/emoji": "V",
    "zz%2F": "V",
}


def _put(store: SqliteMetadataStore, key: str, kind: str) -> dict[str, Any]:
    sort_key = new_version_id()
    meta = {
        "bucket": BUCKET,
        "key": key,
        "versionId": "null" if kind == "N" else sort_key,
        "sortKey": sort_key,
        "isDeleteMarker": kind == "D",
        "size": 0 if kind == "D" else len(key),
        "etag": "" if kind == "D" else "d41d8cd98f00b204e9800998ecf8427e",
        "lastModified": "2026-01-02T03:04:05.678Z",
        "location": [],
    }
    store.put_version(meta)
    return meta


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqliteMetadataStore]:
    path: Path = tmp_path_factory.mktemp("listing") / "metadata.sqlite3"
    s = SqliteMetadataStore(
        path, MetadataSettings(journal_retention_entries=None, journal_retention_seconds=None)
    )
    s.create_bucket(Bucket(BUCKET, "owner-id", "", "2026-01-01T00:00:00.000Z"))
    for key, history in HISTORY.items():
        for kind in history:
            _put(s, key, kind)
    yield s
    s.close()


@pytest.fixture(scope="module")
def versions(store: SqliteMetadataStore) -> list[tuple[str, str, bool]]:
    """(key, versionId, isDeleteMarker) in S3 order, read back from the store once."""
    rows = store.list_versions(BUCKET, limit=1000)
    return [(r["key"], r["versionId"], bool(r["isDeleteMarker"])) for r in rows]


# -- reference model -------------------------------------------------------------------------


def utf8(value: str) -> bytes:
    return value.encode("utf-8")


def live_keys() -> list[str]:
    return sorted((k for k, h in HISTORY.items() if h[-1] != "D"), key=utf8)


def rollup(key: str, prefix: str, delimiter: str) -> str | None:
    if not delimiter:
        return None
    at = key.find(delimiter, len(prefix))
    return None if at < 0 else key[: at + len(delimiter)]


def ref_objects(prefix: str, delimiter: str) -> list[tuple[str, str]]:
    """("K", key) and ("P", common prefix) items in listing order."""
    items: list[tuple[str, str]] = []
    for key in live_keys():
        if not key.startswith(prefix):
            continue
        common = rollup(key, prefix, delimiter)
        if common is None:
            items.append(("K", key))
        elif ("P", common) not in items:
            items.append(("P", common))
    return sorted(items, key=lambda item: utf8(item[1]))


def ref_versions(
    versions: list[tuple[str, str, bool]], prefix: str, delimiter: str
) -> list[tuple[str, ...]]:
    items: list[tuple[str, ...]] = []
    for key, version_id, _ in versions:
        if not key.startswith(prefix):
            continue
        common = rollup(key, prefix, delimiter)
        if common is None:
            items.append(("V", key, version_id))
        elif ("P", common) not in items:
            items.append(("P", common))
    return items


# -- running listings ------------------------------------------------------------------------


def xml(doc: bytes) -> ET.Element:
    return ET.fromstring(doc)


def text(root: ET.Element, path: str) -> str | None:
    return root.findtext("/".join(N + part for part in path.split("/")))


def decoder(root: ET.Element) -> Any:
    return unquote_plus if text(root, "EncodingType") == "url" else (lambda v: v)


def object_page(root: ET.Element) -> tuple[list[str], list[str]]:
    dec = decoder(root)
    keys = [dec(c.findtext(N + "Key")) for c in root.findall(N + "Contents")]
    prefixes = [dec(p.findtext(N + "Prefix")) for p in root.findall(N + "CommonPrefixes")]
    return keys, prefixes


def walk_objects(
    store: SqliteMetadataStore, query: dict[str, str], v2: bool
) -> list[list[tuple[str, str]]]:
    pages: list[list[tuple[str, str]]] = []
    query = dict(query)
    for _ in range(200):
        root = xml(listing.list_objects(store, BUCKET, query, v2))
        keys, prefixes = object_page(root)
        items = sorted(
            [("K", k) for k in keys] + [("P", p) for p in prefixes], key=lambda i: utf8(i[1])
        )
        pages.append(items)
        if v2:
            assert int(text(root, "KeyCount") or -1) == len(items)
        if text(root, "IsTruncated") != "true":
            assert text(root, "NextMarker") is None and text(root, "NextContinuationToken") is None
            return pages
        if v2:
            token = text(root, "NextContinuationToken")
            assert token
            query["continuation-token"] = token
        else:
            next_marker = text(root, "NextMarker")
            if query.get("delimiter"):
                assert next_marker is not None
                query["marker"] = decoder(root)(next_marker)
            else:
                assert next_marker is None  # NextMarker only with a delimiter
                query["marker"] = keys[-1]
    raise AssertionError("listing did not terminate")


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


PREFIXES = ["", "a", "a/", "é", "日本", "gone/", "nothing"]


@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("delimiter", ["", "/", " ", "b", "+/"])
@pytest.mark.parametrize("max_keys", [1, 2, 3, 1000])
def test_object_listing_pages_match_reference(
    store: SqliteMetadataStore, v2: bool, delimiter: str, max_keys: int
) -> None:
    for prefix in PREFIXES:
        query = {"prefix": prefix, "max-keys": str(max_keys), "encoding-type": "url"}
        if delimiter:
            query["delimiter"] = delimiter
        expected = ref_objects(prefix, delimiter)
        assert walk_objects(store, query, v2) == chunks(expected, max_keys), (prefix, delimiter)


def test_deleted_keys_and_all_deleted_prefixes_are_hidden(store: SqliteMetadataStore) -> None:
    keys, prefixes = object_page(xml(listing.list_objects(store, BUCKET, {"delimiter": "/"}, True)))
    assert "gone/" not in prefixes and "dm/" in prefixes and "a/" in prefixes
    keys, _ = object_page(xml(listing.list_objects(store, BUCKET, {"prefix": "a/"}, True)))
    assert "a/c" not in keys and "a/b" in keys


def test_without_encoding_type_values_are_raw(store: SqliteMetadataStore) -> None:
    root = xml(listing.list_objects(store, BUCKET, {"prefix": "a", "delimiter": "/"}, False))
    assert text(root, "EncodingType") is None
    keys, prefixes = object_page(root)
    assert keys == ["a", "a b", "a+b", "ab"] and prefixes == ["a/"]


def test_encoding_type_url_encodes_plus_space_and_unicode_but_not_slash(
    store: SqliteMetadataStore,
) -> None:
    query = {"prefix": "", "encoding-type": "url", "delimiter": "/", "start-after": "a b"}
    root = xml(listing.list_objects(store, BUCKET, query, True))
    raw_keys = [c.findtext(N + "Key") for c in root.findall(N + "Contents")]
    raw_prefixes = [p.findtext(N + "Prefix") for p in root.findall(N + "CommonPrefixes")]
    assert "a%2Bb" in raw_keys and "%C3%A9" in raw_keys and "zz%252F" in raw_keys
    assert "c%20d/" in raw_prefixes and "%E6%97%A5%E6%9C%AC/" in raw_prefixes
    assert text(root, "StartAfter") == "a%20b"
    assert text(root, "Delimiter") == "/"
    assert text(root, "EncodingType") == "url"


def test_v1_marker_and_v2_start_after(store: SqliteMetadataStore) -> None:
    expected = [k for k in live_keys() if utf8(k) > utf8("a/b")]
    for v2, name in ((False, "marker"), (True, "start-after")):
        keys, _ = object_page(xml(listing.list_objects(store, BUCKET, {name: "a/b"}, v2)))
        assert keys == expected
    # a marker inside a common prefix: the prefix is listed again (keys after it roll up)
    root = xml(listing.list_objects(store, BUCKET, {"marker": "a/b", "delimiter": "/"}, False))
    assert object_page(root)[1][0] == "a/"
    assert text(root, "Marker") == "a/b"
    # a marker that *is* a common prefix resumes after the whole prefix
    _, prefixes = object_page(
        xml(listing.list_objects(store, BUCKET, {"marker": "a/", "delimiter": "/"}, False))
    )
    assert "a/" not in prefixes


def test_continuation_token_is_opaque_and_wins_over_start_after(store: SqliteMetadataStore) -> None:
    first = xml(listing.list_objects(store, BUCKET, {"max-keys": "2", "start-after": "a"}, True))
    token = text(first, "NextContinuationToken")
    assert token and "/" not in token and "+" not in token
    second = xml(
        listing.list_objects(
            store,
            BUCKET,
            {"max-keys": "2", "start-after": "zzzz", "continuation-token": token},
            True,
        )
    )
    assert text(second, "ContinuationToken") == token
    assert text(second, "StartAfter") == "zzzz"
    assert object_page(second)[0] == live_keys()[3:5]


def test_owner_v1_always_v2_with_fetch_owner(store: SqliteMetadataStore) -> None:
    bucket = store.get_bucket(BUCKET)
    v1 = xml(listing.list_objects(store, bucket, {"max-keys": "1"}, False))
    assert text(v1, "Contents/Owner/ID") == "owner-id"
    assert text(v1, "Name") == BUCKET
    v2 = xml(listing.list_objects(store, bucket, {"max-keys": "1"}, True))
    assert v2.find(f"{N}Contents/{N}Owner") is None
    v2o = xml(listing.list_objects(store, bucket, {"max-keys": "1", "fetch-owner": "true"}, True))
    assert text(v2o, "Contents/Owner/ID") == "owner-id"


def test_contents_fields(store: SqliteMetadataStore) -> None:
    root = xml(listing.list_objects(store, BUCKET, {"prefix": "a b"}, True))
    contents = root.find(N + "Contents")
    assert contents is not None
    assert contents.findtext(N + "ETag") == '"d41d8cd98f00b204e9800998ecf8427e"'
    # whole seconds, as S3 lists them and the Last-Modified header says: with the stored
    # milliseconds, `aws s3 sync --exact-timestamps` downloaded every object on every run
    assert contents.findtext(N + "LastModified") == "2026-01-02T03:04:05.000Z"
    assert contents.findtext(N + "Size") == "3"
    assert contents.findtext(N + "StorageClass") == "STANDARD"
    assert contents.find(N + "ChecksumAlgorithm") is None


def test_checksum_algorithm_of_the_gateway_checksum_record(
    upload_store: SqliteMetadataStore,
) -> None:
    meta = _put(upload_store, "k", "V")
    meta.update(checksum={"algorithm": "crc32c", "value": "AAAAAA==", "type": "FULL_OBJECT"})
    meta["sortKey"] = meta["versionId"] = new_version_id()
    upload_store.put_version(meta)
    for doc in (
        listing.list_objects(upload_store, BUCKET, {}, True),
        listing.list_object_versions(upload_store, BUCKET, {"max-keys": "1"}),
    ):
        root = xml(doc)
        assert [e.text for e in root.iter(N + "ChecksumAlgorithm")] == ["CRC32C"]
        assert [e.text for e in root.iter(N + "ChecksumType")] == ["FULL_OBJECT"]


def test_max_keys_zero_and_caps(store: SqliteMetadataStore) -> None:
    root = xml(listing.list_objects(store, BUCKET, {"max-keys": "0"}, True))
    assert root.find(N + "Contents") is None and text(root, "IsTruncated") == "false"
    assert text(root, "KeyCount") == "0"
    root = xml(listing.list_objects(store, BUCKET, {"max-keys": "5000"}, True))
    assert text(root, "MaxKeys") == "1000"
    assert len(object_page(root)[0]) == len(live_keys())


@pytest.mark.parametrize(
    "query",
    [
        {"max-keys": "-1"},
        {"max-keys": "ten"},
        {"max-keys": "1.5"},
        {"encoding-type": "base64"},
        {"continuation-token": "%%%not-base64"},
        {"continuation-token": ""},  # names no key: it listed from the start
        {"max-keys": "99999999999"},  # over an int32: refused by AWS, it was capped
    ],
)
def test_invalid_arguments(store: SqliteMetadataStore, query: dict[str, str]) -> None:
    with pytest.raises(S3Error) as info:
        listing.list_objects(store, BUCKET, query, True)
    assert info.value.code == "InvalidArgument"
    with pytest.raises(S3Error):
        listing.list_object_versions(
            store,
            BUCKET,
            {k: v for k, v in query.items() if k != "continuation-token"} or {"max-keys": "x"},
        )


# -- versions --------------------------------------------------------------------------------


def walk_versions(store: SqliteMetadataStore, query: dict[str, str]) -> list[list[tuple[str, ...]]]:
    pages: list[list[tuple[str, ...]]] = []
    query = dict(query)
    for _ in range(300):
        root = xml(listing.list_object_versions(store, BUCKET, query))
        dec = decoder(root)
        items: list[tuple[str, ...]] = []
        for element in root:
            if element.tag in (N + "Version", N + "DeleteMarker"):
                items.append(
                    ("V", dec(element.findtext(N + "Key")), element.findtext(N + "VersionId") or "")
                )
        prefixes: list[tuple[str, ...]] = [
            ("P", dec(p.findtext(N + "Prefix"))) for p in root.findall(N + "CommonPrefixes")
        ]
        pages.append(items + prefixes)
        if text(root, "IsTruncated") != "true":
            assert text(root, "NextKeyMarker") is None
            return pages
        next_key = text(root, "NextKeyMarker")
        assert next_key is not None
        query["key-marker"] = dec(next_key)
        query["version-id-marker"] = text(root, "NextVersionIdMarker") or ""
    raise AssertionError("listing did not terminate")


def page_order(
    page: list[tuple[str, ...]], reference: list[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    return sorted(page, key=reference.index)


@pytest.mark.parametrize("delimiter", ["", "/", "b"])
@pytest.mark.parametrize("max_keys", [1, 2, 5, 1000])
def test_version_listing_pages_match_reference(
    store: SqliteMetadataStore,
    versions: list[tuple[str, str, bool]],
    delimiter: str,
    max_keys: int,
) -> None:
    for prefix in ["", "a/", "é", "gone/"]:
        query = {"prefix": prefix, "max-keys": str(max_keys), "encoding-type": "url"}
        if delimiter:
            query["delimiter"] = delimiter
        expected = ref_versions(versions, prefix, delimiter)
        pages = walk_versions(store, query)
        for page in pages:
            versions_in_page = [item for item in page if item[0] == "V"]
            assert versions_in_page == page_order(versions_in_page, expected)  # document order
        assert [page_order(p, expected) for p in pages] == chunks(expected, max_keys), prefix


def test_versions_newest_first_with_markers_and_null(
    store: SqliteMetadataStore, versions: list[tuple[str, str, bool]]
) -> None:
    assert len(versions) == sum(len(h) for h in HISTORY.values())
    root = xml(listing.list_object_versions(store, BUCKET, {"prefix": "a/c"}))
    entries = [(e.tag.removeprefix(N), e.findtext(N + "IsLatest")) for e in root]
    entries = [e for e in entries if e[0] in ("Version", "DeleteMarker")]
    assert entries == [("DeleteMarker", "true"), ("Version", "false")]
    marker = root.find(N + "DeleteMarker")
    assert (
        marker is not None and marker.find(N + "ETag") is None and marker.find(N + "Size") is None
    )
    root = xml(listing.list_object_versions(store, BUCKET, {"prefix": "ab"}))
    ids = [v.findtext(N + "VersionId") for v in root.findall(N + "Version")]
    assert len(ids) == 2 and ids[1] == "null"
    root = xml(listing.list_object_versions(store, BUCKET, {"prefix": "é/1"}))
    assert [v.findtext(N + "VersionId") for v in root.findall(N + "Version")][0] == "null"


def test_version_markers(store: SqliteMetadataStore, versions: list[tuple[str, str, bool]]) -> None:
    b_versions = [v for v in versions if v[0] == "a/b"]
    query = {"key-marker": "a/b", "version-id-marker": b_versions[0][1], "max-keys": "3"}
    root = xml(listing.list_object_versions(store, BUCKET, query))
    listed = [
        (v.findtext(N + "Key"), v.findtext(N + "VersionId")) for v in root.findall(N + "Version")
    ]
    after = versions.index(b_versions[0]) + 1
    assert listed == [(k, v) for k, v, _ in versions[after : after + 3]]
    assert [k for k, _ in listed] == ["a/b", "a/b", "a/b/c"]
    assert text(root, "KeyMarker") == "a/b" and text(root, "VersionIdMarker") == b_versions[0][1]
    root = xml(listing.list_object_versions(store, BUCKET, {"key-marker": "a/b"}))
    assert all(v.findtext(N + "Key") != "a/b" for v in root.findall(N + "Version"))
    with pytest.raises(S3Error) as info:
        listing.list_object_versions(store, BUCKET, {"version-id-marker": "x"})
    assert info.value.code == "InvalidArgument"


# -- skipping whole common prefixes ----------------------------------------------------------


class CountingStore:
    """The real store, counting how many rows the listing reads from it."""

    def __init__(self, store: SqliteMetadataStore) -> None:
        self.store = store
        self.rows = 0
        self.calls = 0

    def list_latest(self, bucket: str, **kwargs: Any) -> list[dict[str, Any]]:
        rows = self.store.list_latest(bucket, **kwargs)
        self.rows += len(rows)
        self.calls += 1
        return rows

    def list_versions(self, bucket: str, **kwargs: Any) -> list[dict[str, Any]]:
        rows = self.store.list_versions(bucket, **kwargs)
        self.rows += len(rows)
        self.calls += 1
        return rows

    def list_uploads(self, bucket: str, **kwargs: Any) -> list[dict[str, Any]]:
        return self.store.list_uploads(bucket, **kwargs)

    def list_parts(self, upload_id: str, **kwargs: Any) -> list[dict[str, Any]]:
        return self.store.list_parts(upload_id, **kwargs)


def test_common_prefix_is_skipped_without_scanning_its_keys(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = SqliteMetadataStore(tmp_path / "m.sqlite3", MetadataSettings())
    try:
        store.create_bucket(Bucket(BUCKET, "o", "", "2026-01-01T00:00:00.000Z"))
        keys = [f"big/{i:05d}" for i in range(3000)] + ["a", "big0", "c/x", "zz"]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: _put(store, k, "V"), keys))
        counting = CountingStore(store)
        root = xml(listing.list_objects(counting, BUCKET, {"delimiter": "/"}, True))
        assert object_page(root) == (["a", "big0", "zz"], ["big/", "c/"])
        assert counting.rows < 200, counting.rows
        counting = CountingStore(store)
        root = xml(listing.list_object_versions(counting, BUCKET, {"delimiter": "/"}))
        assert [p.findtext(N + "Prefix") for p in root.findall(N + "CommonPrefixes")] == [
            "big/",
            "c/",
        ]
        assert counting.rows < 200, counting.rows
        # and a page that ends on the big prefix resumes after it
        counting = CountingStore(store)
        query = {"delimiter": "/", "max-keys": "1", "marker": "a"}
        root = xml(listing.list_objects(counting, BUCKET, query, False))
        assert text(root, "NextMarker") == "big/"
        query["marker"] = "big/"
        root = xml(listing.list_objects(counting, BUCKET, query, False))
        assert object_page(root) == (["big0"], [])
        assert counting.rows < 200, counting.rows
        # runs of delete markers are skipped in growing batches, not one query per row
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: _put(store, k, "D"), [f"m{i:04d}" for i in range(1000)]))
        counting = CountingStore(store)
        root = xml(
            listing.list_objects(counting, BUCKET, {"max-keys": "1", "start-after": "c"}, True)
        )
        assert object_page(root) == (["c/x"], []) and text(root, "IsTruncated") == "true"
        assert counting.calls < 15, counting.calls
        # and their documents are not even read: the store skips them (a listing past
        # 120,000 delete markers took 200 ms, also for max-keys=1)
        counting = CountingStore(store)
        root = xml(listing.list_objects(counting, BUCKET, {"max-keys": "1", "start-after": "c/x"}, True))
        assert object_page(root) == (["zz"], [])
        assert counting.rows <= 2, counting.rows
    finally:
        store.close()


# -- multipart uploads and parts -------------------------------------------------------------


@pytest.fixture
def upload_store(tmp_path: Path) -> Iterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "m.sqlite3", MetadataSettings())
    store.create_bucket(Bucket(BUCKET, "o", "", "2026-01-01T00:00:00.000Z"))
    yield store
    store.close()


def _upload(store: SqliteMetadataStore, key: str) -> dict[str, Any]:
    upload = {
        "uploadId": new_upload_id(),
        "bucket": BUCKET,
        "key": key,
        "initiated": "2026-01-01T00:00:00.000Z",
        "meta": {"owner": "o"},
    }
    store.create_upload(upload)
    return upload


def test_list_multipart_uploads_paginates(upload_store: SqliteMetadataStore) -> None:
    made = [_upload(upload_store, k) for k in ["x/1", "a b", "a b", "x/2", "é+", "y"]]
    expected = sorted(((u["key"], u["uploadId"]) for u in made), key=lambda t: (utf8(t[0]), t[1]))
    seen: list[tuple[str, str]] = []
    query = {"max-uploads": "2", "encoding-type": "url"}
    for _ in range(10):
        root = xml(listing.list_multipart_uploads(upload_store, BUCKET, query))
        dec = decoder(root)
        page = [
            (dec(u.findtext(N + "Key")), u.findtext(N + "UploadId") or "")
            for u in root.findall(N + "Upload")
        ]
        assert len(page) <= 2
        seen += page
        if text(root, "IsTruncated") != "true":
            break
        query["key-marker"] = dec(text(root, "NextKeyMarker"))
        query["upload-id-marker"] = text(root, "NextUploadIdMarker") or ""
    assert seen == expected
    root = xml(listing.list_multipart_uploads(upload_store, BUCKET, {"delimiter": "/"}))
    assert [p.findtext(N + "Prefix") for p in root.findall(N + "CommonPrefixes")] == ["x/"]
    assert [u.findtext(N + "Key") for u in root.findall(N + "Upload")] == ["a b", "a b", "y", "é+"]


def test_list_parts_paginates(upload_store: SqliteMetadataStore) -> None:
    upload = _upload(upload_store, "big")
    for n in (3, 1, 2, 5, 4):
        upload_store.put_part(
            upload["uploadId"],
            {
                "partNumber": n,
                "etag": f"e{n}",
                "size": n,
                "location": [],
                "checksums": {"crc32": f"c{n}"},
                "lastModified": "2026-01-01T00:00:00.000Z",
            },
        )
    numbers: list[int] = []
    query = {"max-parts": "2"}
    for _ in range(10):
        root = xml(listing.list_parts(upload_store, upload, query))
        numbers += [int(p.findtext(N + "PartNumber") or 0) for p in root.findall(N + "Part")]
        if text(root, "IsTruncated") != "true":
            break
        query["part-number-marker"] = text(root, "NextPartNumberMarker") or ""
    assert numbers == [1, 2, 3, 4, 5]
    # max-parts=0 is not truncated (it said so with no marker to go on from); a marker past
    # the last part still names where to go on
    assert text(xml(listing.list_parts(upload_store, upload, {"max-parts": "0"})), "IsTruncated") == "false"
    past = xml(listing.list_parts(upload_store, upload, {"part-number-marker": "9"}))
    assert text(past, "NextPartNumberMarker") == "9" and text(past, "IsTruncated") == "false"
    root = xml(listing.list_parts(upload_store, upload, {}))
    assert text(root, "Part/ETag") == '"e1"' and text(root, "Part/ChecksumCRC32") == "c1"
    assert text(root, "UploadId") == upload["uploadId"] and text(root, "Owner/ID") == "o"
    for bad in ({"part-number-marker": "x"}, {"part-number-marker": "-1"}, {"max-parts": "-3"}):
        with pytest.raises(S3Error) as info:
            listing.list_parts(upload_store, upload, bad)
        assert info.value.code == "InvalidArgument"
