"""S3 XML documents: rendering, parsing the bodies real clients send, and refusing hostile XML."""

from __future__ import annotations

import datetime as dt
from xml.etree import ElementTree as ET

import pytest

from crossbeat.s3 import xmldoc
from crossbeat.s3.errors import S3Error
from crossbeat.s3.xmldoc import NS

N = "{" + NS + "}"

# Verbatim bodies from ../shared/reference/s3-wire-captures/
BOTO_DELETE = b'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a</Key></Object><Object><Key>b</Key></Object></Delete>'
BOTO_COMPLETE = b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><PartNumber>1</PartNumber><ChecksumCRC32>r/zBbw==</ChecksumCRC32></Part><Part><ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><PartNumber>2</PartNumber><ChecksumCRC32>TBHN8A==</ChecksumCRC32></Part></CompleteMultipartUpload>'
RCLONE_COMPLETE = b'<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>&#34;d41d8cd98f00b204e9800998ecf8427e&#34;</ETag><PartNumber>1</PartNumber></Part><Part><ETag>&#34;d41d8cd98f00b204e9800998ecf8427e&#34;</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>'


def parse(doc: bytes) -> ET.Element:
    assert doc.startswith(b'<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(doc)


def code_of(fn: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(S3Error) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    return info.value.code


# -- hostile and malformed XML ---------------------------------------------------------------

HOSTILE = [
    b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x "boom">]><Delete><Object><Key>&x;</Key></Object></Delete>',
    b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]><Delete><Object><Key>&x;</Key></Object></Delete>',
    b'<!DOCTYPE d SYSTEM "http://127.0.0.1:1/evil.dtd"><Delete><Object><Key>a</Key></Object></Delete>',
    b'<!DOCTYPE d [<!ENTITY % p SYSTEM "http://127.0.0.1:1/x"> %p;]><Delete/>',
    b'<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]><Delete><Object><Key>&lol2;</Key></Object></Delete>',
    b"<Delete><Object><Key>&undefined;</Key></Object></Delete>",
    b"<Delete><Object><Key>a</Key></Object>",
    b"not xml at all",
    b"",
    b"   ",
    b"<Delete></Delete><Delete></Delete>",
]


@pytest.mark.parametrize("body", HOSTILE)
def test_hostile_or_malformed_xml_is_malformedxml(body: bytes) -> None:
    assert code_of(xmldoc.parse_delete_objects, body) == "MalformedXML"


def test_utf16_doctype_is_refused_too() -> None:
    body = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE d [<!ENTITY x "y">]><Tagging/>'
    assert code_of(xmldoc.parse_tagging, body.encode("utf-16")) == "MalformedXML"


def test_deep_nesting_is_malformedxml() -> None:
    body = b"<Delete>" + b"<a>" * 10_000 + b"</a>" * 10_000 + b"</Delete>"
    assert code_of(xmldoc.parse_delete_objects, body) == "MalformedXML"


def test_pretty_printed_documents_parse() -> None:
    body = b'<?xml version="1.0" encoding="UTF-8"?>\n<VersioningConfiguration>\n  <Status>\n    Suspended\n  </Status>\n</VersioningConfiguration>\n'
    assert xmldoc.parse_versioning(body) == "Suspended"


def test_wrong_root_is_malformedxml() -> None:
    assert code_of(xmldoc.parse_versioning, b"<Tagging/>") == "MalformedXML"


# -- errors and buckets ----------------------------------------------------------------------


def test_error_xml_carries_code_message_resource_request_id_and_extras() -> None:
    err = S3Error("NoSuchKey", resource="/b/k&1", extra={"Key": "k&1"})
    root = parse(xmldoc.error_xml(err, "REQ1"))
    assert root.tag == "Error"  # no namespace, as AWS
    assert root.findtext("Code") == "NoSuchKey"
    assert root.findtext("Message") == "The specified key does not exist."
    assert root.findtext("Resource") == "/b/k&1"
    assert root.findtext("Key") == "k&1"
    assert root.findtext("RequestId") == "REQ1"


def test_list_buckets_xml() -> None:
    buckets = [
        {"name": "a", "created": "2026-01-01T00:00:00.000Z"},
        {"name": "b", "created": dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)},
    ]
    root = parse(xmldoc.list_buckets_xml(buckets, "OWNER", "me"))
    assert root.tag == N + "ListAllMyBucketsResult"
    assert root.findtext(f"{N}Owner/{N}ID") == "OWNER"
    names = [b.findtext(N + "Name") for b in root.iter(N + "Bucket")]
    dates = [b.findtext(N + "CreationDate") for b in root.iter(N + "Bucket")]
    assert names == ["a", "b"]
    assert dates == ["2026-01-01T00:00:00.000Z", "2026-01-02T03:04:05.000Z"]  # whole seconds, as S3


@pytest.mark.parametrize("location", ["", "us-east-1", None])
def test_location_empty_for_us_east_1(location: str | None) -> None:
    root = parse(xmldoc.location_xml(location))
    assert root.tag == N + "LocationConstraint"
    assert not root.text


def test_location_named() -> None:
    assert parse(xmldoc.location_xml("eu-west-1")).text == "eu-west-1"


def test_parse_create_bucket() -> None:
    assert xmldoc.parse_create_bucket(b"") is None
    body = b'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>'
    assert xmldoc.parse_create_bucket(body) == "eu-west-1"
    plain = b"<CreateBucketConfiguration><LocationConstraint>site-b</LocationConstraint></CreateBucketConfiguration>"
    assert xmldoc.parse_create_bucket(plain) == "site-b"
    assert xmldoc.parse_create_bucket(b"<CreateBucketConfiguration/>") is None
    assert code_of(xmldoc.parse_create_bucket, b"<Bucket/>") == "MalformedXML"


def test_versioning_round_trip_and_never_versioned() -> None:
    empty = parse(xmldoc.versioning_xml(""))
    assert empty.tag == N + "VersioningConfiguration" and len(empty) == 0
    for status in ("Enabled", "Suspended"):
        doc = xmldoc.versioning_xml(status)
        assert parse(doc).findtext(N + "Status") == status
        assert xmldoc.parse_versioning(doc) == status


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (
            b"<VersioningConfiguration><Status>enabled</Status></VersioningConfiguration>",
            "IllegalVersioningConfigurationException",
        ),
        (
            b"<VersioningConfiguration><Status></Status></VersioningConfiguration>",
            "IllegalVersioningConfigurationException",
        ),
        (b"<VersioningConfiguration/>", "IllegalVersioningConfigurationException"),
        (
            b"<VersioningConfiguration><Status>Enabled</Status><MfaDelete>Enabled</MfaDelete></VersioningConfiguration>",
            "NotImplemented",
        ),
        (b"<VersioningConfiguration><Status>Enabled</Status>", "MalformedXML"),
        # the MinIO SDKs' spelling: refused as AWS's is, not dropped (the status changed)
        (
            b"<VersioningConfiguration><Status>Enabled</Status><MFADelete>Enabled</MFADelete></VersioningConfiguration>",
            "NotImplemented",
        ),
        (
            b"<VersioningConfiguration><Status>Enabled</Status><MFADelete>Bogus</MFADelete></VersioningConfiguration>",
            "IllegalVersioningConfigurationException",
        ),
        (
            b"<VersioningConfiguration><Status>Enabled</Status><Mfa>Enabled</Mfa></VersioningConfiguration>",
            "MalformedXML",
        ),
    ],
)
def test_parse_versioning_errors(body: bytes, code: str) -> None:
    assert code_of(xmldoc.parse_versioning, body) == code


# -- multipart -------------------------------------------------------------------------------


def test_parse_complete_upload_boto3_capture() -> None:
    parts = xmldoc.parse_complete_upload(BOTO_COMPLETE)
    assert [(p.part_number, p.etag) for p in parts] == [
        (1, "d41d8cd98f00b204e9800998ecf8427e"),
        (2, "d41d8cd98f00b204e9800998ecf8427e"),
    ]
    assert parts[0].checksums == {"crc32": "r/zBbw=="}
    assert parts[1].checksums == {"crc32": "TBHN8A=="}


def test_parse_complete_upload_rclone_escaped_quotes() -> None:
    parts = xmldoc.parse_complete_upload(RCLONE_COMPLETE)
    assert [p.etag for p in parts] == ["d41d8cd98f00b204e9800998ecf8427e"] * 2
    assert all(p.checksums == {} for p in parts)


def test_parse_complete_upload_quot_and_bare_etags() -> None:
    body = b"<CompleteMultipartUpload><Part><PartNumber>3</PartNumber><ETag>&quot;abc&quot;</ETag></Part><Part><PartNumber>7</PartNumber><ETag>def</ETag></Part></CompleteMultipartUpload>"
    assert [(p.part_number, p.etag) for p in xmldoc.parse_complete_upload(body)] == [
        (3, "abc"),
        (7, "def"),
    ]


def _complete(*numbers: str) -> bytes:
    parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>e</ETag></Part>" for n in numbers)
    return f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()


@pytest.mark.parametrize(
    ("numbers", "code"),
    [
        (("2", "1"), "InvalidPartOrder"),
        (("1", "1"), "InvalidPartOrder"),
        (("0",), "InvalidArgument"),
        (("10001",), "InvalidArgument"),
        (("x",), "MalformedXML"),
        ((), "MalformedXML"),
    ],
)
def test_parse_complete_upload_errors(numbers: tuple[str, ...], code: str) -> None:
    assert code_of(xmldoc.parse_complete_upload, _complete(*numbers)) == code


def test_parse_complete_upload_part_without_etag() -> None:
    body = b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>"
    assert code_of(xmldoc.parse_complete_upload, body) == "MalformedXML"


def test_initiate_and_complete_xml() -> None:
    root = parse(xmldoc.initiate_upload_xml("b", "k +x", "UP"))
    assert root.tag == N + "InitiateMultipartUploadResult"
    assert [root.findtext(N + t) for t in ("Bucket", "Key", "UploadId")] == ["b", "k +x", "UP"]
    doc = xmldoc.complete_upload_xml(
        "http://h/b/k", "b", "k", "abc-2", {"crc32": "AAAAAA==", "sha256": "x"}, "COMPOSITE"
    )
    root = parse(doc)
    assert root.findtext(N + "ETag") == '"abc-2"'
    assert root.findtext(N + "ChecksumCRC32") == "AAAAAA=="
    assert root.findtext(N + "ChecksumSHA256") == "x"
    assert root.findtext(N + "ChecksumType") == "COMPOSITE"
    assert root.findtext(N + "Location") == "http://h/b/k"


def test_copy_results() -> None:
    root = parse(xmldoc.copy_object_result_xml('"e"', 0, {"crc32c": "c"}))
    assert root.tag == N + "CopyObjectResult"
    assert root.findtext(N + "ETag") == '"e"'
    assert root.findtext(N + "LastModified") == "1970-01-01T00:00:00.000Z"
    assert root.findtext(N + "ChecksumCRC32C") == "c"
    assert (
        parse(xmldoc.copy_part_result_xml("e", "2026-01-01T00:00:00.000Z")).tag
        == N + "CopyPartResult"
    )


def test_list_parts_and_uploads_xml() -> None:
    parts = [
        {
            "partNumber": 1,
            "etag": "e1",
            "size": 5,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "checksums": {"crc32": "c"},
        }
    ]
    root = parse(
        xmldoc.list_parts_xml(
            bucket="b",
            key="k",
            upload_id="u",
            parts=parts,
            part_number_marker=0,
            next_part_number_marker=1,
            max_parts=1,
            is_truncated=True,
            owner_id="o",
        )
    )
    assert root.findtext(N + "IsTruncated") == "true"
    assert root.findtext(f"{N}Part/{N}ETag") == '"e1"'
    assert root.findtext(f"{N}Part/{N}ChecksumCRC32") == "c"
    assert root.findtext(N + "NextPartNumberMarker") == "1"
    uploads = [
        {"key": "a b+", "uploadId": "u1", "initiated": "2026-01-01T00:00:00.000Z", "meta": {}}
    ]
    root = parse(
        xmldoc.list_uploads_xml(
            bucket="b",
            uploads=uploads,
            common_prefixes=["d +/"],
            prefix="",
            delimiter="/",
            key_marker="",
            upload_id_marker="",
            next_key_marker=None,
            next_upload_id_marker=None,
            max_uploads=1000,
            is_truncated=False,
            encode=True,
        )
    )
    assert root.findtext(f"{N}Upload/{N}Key") == "a%20b%2B"
    assert root.findtext(f"{N}CommonPrefixes/{N}Prefix") == "d%20%2B/"
    assert root.findtext(N + "EncodingType") == "url"


def test_checksum_elements_are_botocores_for_every_accepted_algorithm() -> None:
    """Every algorithm the gateway takes renders and parses under the name botocore's S3
    model gives it, in each document that carries part or object checksums."""
    import botocore.session

    from crossbeat.s3.checksums import ALGORITHMS

    model = botocore.session.get_session().get_service_model("s3")
    assert set(xmldoc.CHECKSUM_ELEMENTS) == {a.lower() for a in ALGORITHMS}
    for shape in ("Part", "CompletedPart", "CopyPartResult", "CopyObjectResult", "Checksum", "ObjectPart"):
        members = {n for n in model.shape_for(shape).members if n.startswith("Checksum") and n != "ChecksumType"}
        assert members == set(xmldoc.CHECKSUM_ELEMENTS.values()), shape


def test_parse_complete_upload_reads_every_algorithms_part_checksum() -> None:
    values = {alg: f"v-{alg}" for alg in xmldoc.CHECKSUM_ELEMENTS}
    elements = "".join(f"<{xmldoc.CHECKSUM_ELEMENTS[alg]}>{v}</{xmldoc.CHECKSUM_ELEMENTS[alg]}>" for alg, v in values.items())
    body = f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>e</ETag>{elements}</Part></CompleteMultipartUpload>"
    assert xmldoc.parse_complete_upload(body)[0].checksums == values
    assert parse(xmldoc.copy_part_result_xml("e", 0, {"sha512": "s"})).findtext(N + "ChecksumSHA512") == "s"


def test_list_parts_and_uploads_name_the_checksum_type() -> None:
    root = parse(xmldoc.list_parts_xml(
        bucket="b", key="k", upload_id="u", parts=[], part_number_marker=0, next_part_number_marker=0,
        max_parts=1000, is_truncated=False, checksum_algorithm="CRC32", checksum_type="FULL_OBJECT",
    ))
    assert (root.findtext(N + "ChecksumAlgorithm"), root.findtext(N + "ChecksumType")) == ("CRC32", "FULL_OBJECT")
    uploads = [
        {"key": key, "uploadId": key, "initiated": 0, "meta": meta}
        for key, meta in (
            ("full", {"checksumAlgorithm": "CRC32", "checksumType": "FULL_OBJECT"}),
            # an upload made before its type was kept has the algorithm's default
            ("old-crc64", {"checksumAlgorithm": "CRC64NVME", "checksumType": None}),
            ("old-sha", {"checksumAlgorithm": "SHA256"}),
            ("none", {}),
        )
    ]
    root = parse(xmldoc.list_uploads_xml(
        bucket="b", uploads=uploads, common_prefixes=[], prefix="", delimiter="", key_marker="",
        upload_id_marker="", next_key_marker=None, next_upload_id_marker=None, max_uploads=1000,
        is_truncated=False, encode=False,
    ))
    listed = {u.findtext(N + "Key"): u.findtext(N + "ChecksumType") for u in root.iter(N + "Upload")}
    assert listed == {"full": "FULL_OBJECT", "old-crc64": "FULL_OBJECT", "old-sha": "COMPOSITE", "none": None}


# -- DeleteObjects ---------------------------------------------------------------------------


def test_parse_delete_objects_capture() -> None:
    assert xmldoc.parse_delete_objects(BOTO_DELETE) == (False, [xmldoc.DeleteTarget("a"), xmldoc.DeleteTarget("b")])


def test_parse_delete_objects_quiet_and_versions() -> None:
    body = b"<Delete><Quiet>TRUE</Quiet><Object><Key>a &amp; b</Key><VersionId>v1</VersionId></Object><Object><Key>c</Key><VersionId>null</VersionId></Object></Delete>"
    assert xmldoc.parse_delete_objects(body) == (True, [xmldoc.DeleteTarget("a & b", "v1"), xmldoc.DeleteTarget("c", "null")])


def test_parse_delete_objects_limits() -> None:
    def body(n: int) -> bytes:
        return ("<Delete>" + "<Object><Key>k</Key></Object>" * n + "</Delete>").encode()

    assert len(xmldoc.parse_delete_objects(body(1000))[1]) == 1000
    assert code_of(xmldoc.parse_delete_objects, body(1001)) == "MalformedXML"
    assert code_of(xmldoc.parse_delete_objects, body(0)) == "MalformedXML"
    assert (
        code_of(
            xmldoc.parse_delete_objects,
            b"<Delete><Object><VersionId>v</VersionId></Object></Delete>",
        )
        == "MalformedXML"
    )
    assert (
        code_of(
            xmldoc.parse_delete_objects,
            b"<Delete><Quiet>maybe</Quiet><Object><Key>k</Key></Object></Delete>",
        )
        == "MalformedXML"
    )


def test_delete_result_xml() -> None:
    doc = xmldoc.delete_result_xml(
        [
            xmldoc.DeletedObject("plain"),
            xmldoc.DeletedObject("v", version_id="v1"),
            xmldoc.DeletedObject("m", delete_marker=True, delete_marker_version_id="dm1"),
        ],
        [xmldoc.DeleteError("x<y", "AccessDenied", "Access Denied", version_id="v9")],
    )
    root = parse(doc)
    deleted = root.findall(N + "Deleted")
    assert [d.findtext(N + "Key") for d in deleted] == ["plain", "v", "m"]
    assert deleted[0].find(N + "VersionId") is None
    assert deleted[1].findtext(N + "VersionId") == "v1"
    assert deleted[2].findtext(N + "DeleteMarker") == "true"
    assert deleted[2].findtext(N + "DeleteMarkerVersionId") == "dm1"
    error = root.find(N + "Error")
    assert error is not None
    assert [error.findtext(N + t) for t in ("Key", "VersionId", "Code")] == [
        "x<y",
        "v9",
        "AccessDenied",
    ]


# -- tagging ---------------------------------------------------------------------------------


def _tagging(*pairs: tuple[str, str]) -> bytes:
    tags = "".join(f"<Tag><Key>{k}</Key><Value>{v}</Value></Tag>" for k, v in pairs)
    return f'<Tagging xmlns="{NS}"><TagSet>{tags}</TagSet></Tagging>'.encode()


def test_tagging_round_trip() -> None:
    tags = {"a": "1", "b c": "", "k+-=._:/@": "v é"}
    assert xmldoc.parse_tagging(xmldoc.tagging_xml(tags)) == tags
    assert xmldoc.parse_tagging(_tagging()) == {}


@pytest.mark.parametrize(
    "pairs",
    [
        [(f"k{i}", "v") for i in range(11)],
        [("a", "1"), ("a", "2")],
        [("k" * 129, "v")],
        [("k", "v" * 257)],
        [("aws:x", "v")],
        [("bad#key", "v")],
        [("k", "bad*value")],
    ],
)
def test_tagging_aws_limits(pairs: list[tuple[str, str]]) -> None:
    # AWS answers BadRequest for too many object tags, InvalidTag for everything else
    expected = "BadRequest" if len(pairs) > 10 else "InvalidTag"
    assert code_of(xmldoc.parse_tagging, _tagging(*pairs)) == expected


def test_tagging_limits_edges_pass() -> None:
    assert len(xmldoc.parse_tagging(_tagging(*[(f"k{i}", "v") for i in range(10)]))) == 10
    assert xmldoc.parse_tagging(_tagging(("k" * 128, "v" * 256))) == {"k" * 128: "v" * 256}
    assert (
        len(xmldoc.parse_tagging(_tagging(*[(f"k{i}", "v") for i in range(50)]), max_tags=50)) == 50
    )


def test_tagging_malformed() -> None:
    assert code_of(xmldoc.parse_tagging, b"<Tagging/>") == "MalformedXML"
    assert (
        code_of(
            xmldoc.parse_tagging, b"<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>"
        )
        == "MalformedXML"
    )


def test_tagging_header() -> None:
    assert xmldoc.parse_tagging_header("a=1&b%20c=x%2By") == {"a": "1", "b c": "x+y"}
    assert xmldoc.parse_tagging_header("") == {}
    assert code_of(xmldoc.parse_tagging_header, "a=1&a=2") == "InvalidTag"
    # a name alone is a tag with an empty value, as S3 takes it
    assert xmldoc.parse_tagging_header("foo=bar&bar") == {"foo": "bar", "bar": ""}
    assert code_of(xmldoc.parse_tagging_header, "=v") == "InvalidTag"
    assert code_of(xmldoc.parse_tagging_header, "a=%ff") == "InvalidArgument"


# -- text helpers ----------------------------------------------------------------------------


def test_text_escaping_survives_a_parser() -> None:
    nasty = 'a&b<c>d"e\rf\tg\x01h'
    doc = xmldoc.tagging_xml({"k": "v"}).replace(
        b"<Value>v</Value>", f"<Value>{xmldoc.xml_text(nasty)}</Value>".encode()
    )
    # expat refuses &#x1; (not an XML 1.0 character): clients must ask for encoding-type=url
    with pytest.raises(ET.ParseError):
        ET.fromstring(doc)
    clean = nasty.replace("\x01", "")
    assert ET.fromstring(f"<v>{xmldoc.xml_text(clean)}</v>").text == clean


def test_etags_and_timestamps() -> None:
    assert xmldoc.quote_etag("abc") == '"abc"'
    assert xmldoc.quote_etag('"abc"') == '"abc"'
    assert xmldoc.unquote_etag("&#34;abc&#34;") == "abc"
    # whole seconds, as S3 keeps them and the Last-Modified header says
    assert xmldoc.iso8601(1.5) == "1970-01-01T00:00:01.000Z"
    naive = dt.datetime(2026, 5, 6, 7, 8, 9, 123456)
    assert xmldoc.iso8601(naive) == "2026-05-06T07:08:09.000Z"
    assert xmldoc.iso8601("2026-05-06T07:08:09.123Z") == "2026-05-06T07:08:09.000Z"
    assert xmldoc.iso8601("not a time") == "not a time"


def test_url_encode_keeps_slash_and_encodes_plus() -> None:
    assert xmldoc.url_encode("a b+c/é~") == "a%20b%2Bc/%C3%A9~"


def test_parse_delete_objects_conditions() -> None:
    body = (b"<Delete><Object><Key>a</Key><ETag>\"e1\"</ETag><Size>10</Size>"
            b"<LastModifiedTime>2026-11-25T10:00:00.000Z</LastModifiedTime></Object></Delete>")
    target = xmldoc.parse_delete_objects(body)[1][0]
    assert (target.etag, target.size) == ('"e1"', 10)
    assert target.last_modified == dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    http_date = b"<Delete><Object><Key>a</Key><LastModifiedTime>Wed, 25 Nov 2026 10:00:00 GMT</LastModifiedTime></Object></Delete>"
    assert xmldoc.parse_delete_objects(http_date)[1][0].last_modified == dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    bad = b"<Delete><Object><Key>a</Key><Size>ten</Size></Object></Delete>"
    assert code_of(xmldoc.parse_delete_objects, bad) == "MalformedXML"
