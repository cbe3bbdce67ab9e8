"""Zip-based formats (DOCX, PPTX) checked before a parser opens them: a few hundred kilobytes can
inflate to gigabytes (a decompression bomb), and the parsers build a tree of all of it.

Refused with the setting named: more members or more bytes in all than the limits, or the archive
or one member more compressed, as the zip's central directory declares them; then each member is
inflated in bounded steps and counted, since those sizes are only what the sender wrote: one that
inflates past its declared size is refused too."""
from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from io import BytesIO

from services.retriever.ingest.parsed import UnreadableFile

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length (30 bytes)
_STEP = 1 << 20  # bytes inflated at a time: what the count holds in memory
RATIO_FLOOR = 1 << 20  # an archive or member inflating to less than this is never too compressed to parse


@dataclass(frozen=True)
class ArchiveLimits:
    max_bytes: int = 200 * 1024 * 1024  # INGEST_ZIP_MAX_BYTES: all members together, inflated
    max_ratio: float = 100.0  # INGEST_ZIP_MAX_RATIO: inflated / compressed size, of the archive and of each member
    max_members: int = 10_000  # INGEST_ZIP_MAX_MEMBERS: files in the archive


def check_archive(data: bytes, name: str, limits: ArchiveLimits) -> None:
    """Raises UnreadableFile naming the limit when the archive would inflate past one; a file that
    is no zip at all is left to its parser, which says so in its format's words."""
    try:
        members = zipfile.ZipFile(BytesIO(data)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        return
    if len(members) > limits.max_members:
        raise UnreadableFile(name, f"holds {len(members):,} files, over the limit of {limits.max_members:,} "
                                   "(INGEST_ZIP_MAX_MEMBERS)")
    total = sum(m.file_size for m in members)
    if total > limits.max_bytes:
        raise UnreadableFile(name, f"declares {total:,} bytes uncompressed, over the limit of {limits.max_bytes:,} "
                                   "(INGEST_ZIP_MAX_BYTES), so it was not parsed")
    if total > RATIO_FLOOR and total > limits.max_ratio * len(data):  # many small members, each under the floor
        raise UnreadableFile(name, f"expands to {total:,} bytes from {len(data):,}, over the limit of "
                                   f"{limits.max_ratio:g}x (INGEST_ZIP_MAX_RATIO), so it was not parsed")
    for m in members:  # one member, with incompressible padding beside it
        if m.file_size > RATIO_FLOOR and m.file_size > limits.max_ratio * max(m.compress_size, 1):
            raise UnreadableFile(name, f"member {m.filename[:100]!r} expands {m.file_size:,} bytes from "
                                       f"{m.compress_size:,}, over the limit of {limits.max_ratio:g}x "
                                       "(INGEST_ZIP_MAX_RATIO), so it was not parsed")
    for m in members:  # the parsers' zipfile stops at the declared sizes too, but with a CRC error that names nothing
        _check_inflated_size(data, m, name)


def _check_inflated_size(data: bytes, member: zipfile.ZipInfo, name: str) -> None:
    """Inflates the member's compressed bytes a step at a time, stopping one step past the size
    the central directory declares: the sizes checked above hold only if that is never passed."""
    if member.flag_bits & 0x1:
        raise UnreadableFile(name, "is an encrypted archive: remove the password and send it again")
    offset = member.header_offset
    signature, name_length, extra_length = _LOCAL_HEADER.unpack_from(data, offset) \
        if offset + _LOCAL_HEADER.size <= len(data) else (b"", 0, 0)
    if signature != b"PK\x03\x04":
        raise UnreadableFile(name, f"is not a readable zip archive (member {member.filename[:100]!r} has no header)")
    start = offset + _LOCAL_HEADER.size + name_length + extra_length
    packed = memoryview(data)[start:start + member.compress_size]
    if member.compress_type == zipfile.ZIP_STORED:
        return
    if member.compress_type != zipfile.ZIP_DEFLATED:
        raise UnreadableFile(name, f"uses zip compression method {member.compress_type}, which is not supported")
    inflater, total = zlib.decompressobj(-zlib.MAX_WBITS), 0
    try:
        for begin in range(0, len(packed), _STEP):
            pending = packed[begin:begin + _STEP]
            while pending and total <= member.file_size:
                total += len(inflater.decompress(pending, _STEP))
                pending = inflater.unconsumed_tail
        total += len(inflater.flush()) if total <= member.file_size else 0
    except zlib.error as exc:
        raise UnreadableFile(name, f"is not a readable zip archive (member {member.filename[:100]!r}: {exc})") from None
    if total > member.file_size:
        raise UnreadableFile(name, f"member {member.filename[:100]!r} inflates past the {member.file_size:,} bytes its "
                                   "zip headers declare (INGEST_ZIP_MAX_BYTES counts declared sizes), so it was not "
                                   "parsed")
