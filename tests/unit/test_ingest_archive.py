"""Zip-based formats are checked before their parser opens them: members, declared total size,
each member's expansion ratio, and what each member really inflates to (headers can lie)."""
from __future__ import annotations

import io
import os
import struct
import zipfile

import pytest

from ragmesh.types import Document
from services.retriever.ingest.parsed import UnreadableFile
from services.retriever.ingest.parsers import parse
from services.retriever.ingest.parsers.archive import ArchiveLimits, check_archive
from tests.security.test_parse_fairness import bomb_body, docx_with_body
from tests.unit.test_ingest_parsers import docx_bytes, pptx_bytes


def zipped(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def refusal(data: bytes, limits: ArchiveLimits = ArchiveLimits()) -> str:
    with pytest.raises(UnreadableFile) as refused:
        check_archive(data, "f.docx", limits)
    return str(refused.value)


def test_real_office_files_and_stored_members_pass() -> None:
    for data in (docx_bytes([("h", "Scope"), ("p", "In scope.")]), pptx_bytes([("Plan", "Ship.")]),
                 zipped({"photo.jpg": bytes(range(256)) * 8192}, zipfile.ZIP_STORED),
                 zipped({"small.xml": b"<a/>" * 200_000})):  # 800 KB of one tag: under the 1 MiB floor
        check_archive(data, "f.docx", ArchiveLimits())


def test_an_archive_over_a_limit_is_refused_naming_it() -> None:
    assert refusal(zipped({f"m{i}.xml": b"<a/>" for i in range(11)}), ArchiveLimits(max_members=10)) == (
        "f.docx: holds 11 files, over the limit of 10 (INGEST_ZIP_MAX_MEMBERS)")
    assert refusal(zipped({"a.xml": b"x" * 600, "b.xml": b"y" * 600}), ArchiveLimits(max_bytes=1000)) == (
        "f.docx: declares 1,200 bytes uncompressed, over the limit of 1,000 (INGEST_ZIP_MAX_BYTES), so it was not parsed")
    padded = zipped({"word/document.xml": bytes(2 * 1024 * 1024), "media/noise.bin": os.urandom(30_000)})
    assert refusal(padded).startswith("f.docx: member 'word/document.xml' expands 2,097,152 bytes from ")
    split = zipped({f"word/part{i}.xml": bytes(1024 * 1024) for i in range(3)})  # each under the 1 MiB floor
    assert refusal(split).startswith("f.docx: expands to 3,145,728 bytes from ")
    assert refusal(split).endswith("over the limit of 100x (INGEST_ZIP_MAX_RATIO), so it was not parsed")


def test_a_member_that_inflates_past_its_declared_size_is_refused() -> None:
    liar = docx_with_body(bomb_body(20_000), declared=5_000)
    assert refusal(liar) == ("f.docx: member 'word/document.xml' inflates past the 5,000 bytes its zip headers "
                             "declare (INGEST_ZIP_MAX_BYTES counts declared sizes), so it was not parsed")


def test_an_encrypted_member_is_refused_and_a_file_that_is_no_zip_is_left_to_its_parser() -> None:
    data = bytearray(zipped({"word/document.xml": b"<a/>"}))
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        struct.pack_into("<H", data, at + flags_at, 1)
    assert refusal(bytes(data)) == "f.docx: is an encrypted archive: remove the password and send it again"
    check_archive(b"PK\x03\x04 not a zip", "f.docx", ArchiveLimits())


@pytest.mark.parametrize("named", [dict(filename="bomb.docx"), dict(
    mime_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document")])
def test_parse_checks_a_zip_based_file_before_opening_it(named: dict[str, str]) -> None:
    bomb = docx_with_body(bomb_body(200_000))
    with pytest.raises(UnreadableFile, match=r"INGEST_ZIP_MAX_RATIO\), so it was not parsed$"):
        parse(Document("bomb", "c", content=bomb, **named), len(bomb))
