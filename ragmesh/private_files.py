"""DATA_DIR holds the store (key hashes, conversations), secrets, logs, the index snapshot and the
spooled uploads (ragmesh.spool): only the account the services run as may read them. Every process
that writes there (the services, the `ragmesh` command, `make run`'s supervisor) starts with a umask
of 0o077, so what it creates is 0600 (files) or 0700 (folders), and takes away what an earlier
version left readable to others."""
from __future__ import annotations

import os
import stat
from pathlib import Path

UMASK = 0o077
# What ragmesh writes in DATA_DIR (DATA_DIR itself is left as it is: it may be a shared folder such as
# /tmp, whose mode is not ours to change; a DATA_DIR ragmesh makes is 0700 by the umask).
_OURS = ("ragmesh.sqlite3", "ragmesh.sqlite3-wal", "ragmesh.sqlite3-shm", "secrets", "logs", "run", "index", "spool")


def keep_private(data_dir: Path) -> None:
    """Sets the process's umask and tightens what ragmesh already keeps in `data_dir`."""
    os.umask(UMASK)
    for name in _OURS:
        _tighten(data_dir / name)


def _tighten(path: Path) -> None:
    try:
        mode = path.lstat().st_mode
    except OSError:  # not there (yet)
        return
    if stat.S_ISLNK(mode):  # not followed: its target is not necessarily ours
        return
    if mode & 0o077:
        try:
            path.chmod(stat.S_IMODE(mode) & ~0o077)
        except OSError:  # not ours to change (another owner): left as it is
            return
    if stat.S_ISDIR(mode):
        for child in path.iterdir():
            _tighten(child)
