"""Bytes that wait are kept on disk, not in memory: an upload waiting for its tenant's parse turn
(the retriever) or to be sent again (the gateway) would otherwise hold its whole file in memory
while it waits, once for every upload in flight.

A spool is a folder under DATA_DIR (0700, files 0600: ragmesh.private_files' umask, and
tempfile's own mode). Each file in it has no name (O_TMPFILE where the file system has it, else
unlinked at once), so it is gone when it is read back, when its holder is dropped (a failed or
cancelled upload), or when the process ends however it ends; whatever an older version left in
the folder is removed when the spool is opened."""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import BinaryIO

SPOOL_DIR = "spool"  # under DATA_DIR, a folder a service: spool/retriever, spool/gateway


class Spooled:
    """One spooled payload: read it back once (`take`), or drop it; either way its file is gone."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.size = size
        self._file = file
        self._closing = weakref.finalize(self, file.close)

    def append(self, data: bytes) -> None:
        """`data` written after what the file holds (a file received in pieces). Blocking."""
        self._file.seek(0, 2)
        self._file.write(data)
        self._file.flush()
        self.size += len(data)

    def read(self, start: int = 0, stop: int | None = None) -> bytes:
        """The bytes [start, stop), the file kept (a payload sent again reads it again). Blocking."""
        self._file.seek(start)
        return self._file.read(-1 if stop is None else stop - start)

    def take(self) -> bytes:
        """The bytes, the file removed. Blocking."""
        try:
            return self.read()
        finally:
            self.close()

    def close(self) -> None:
        self._closing()


class Spool:
    """A folder of spooled payloads."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)  # made by an older version or by hand: only ours to read
        for left in folder.iterdir():  # named leftovers (a file system without O_TMPFILE, an older version);
            # the nameless files of another process spooling here are not listed, so not touched
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)

    def put(self, data: bytes = b"") -> Spooled:
        """`data` written to a nameless 0600 file in the folder (more may be appended). Blocking."""
        spooled = Spooled(tempfile.TemporaryFile(dir=self.folder), 0)
        try:
            spooled.append(data)
        except BaseException:
            spooled.close()
            raise
        return spooled

    def __repr__(self) -> str:
        return f"Spool({str(self.folder)!r})"
