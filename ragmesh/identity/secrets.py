"""Secrets a single machine can make for itself: the key pepper, the service token and the demo
admin key live in DATA_DIR/secrets (mode 0600), made once and shared by every process that uses
the same DATA_DIR. Deployments across machines set them in the environment instead."""
from __future__ import annotations

import os
import secrets as _random
import time
from pathlib import Path


def secrets_dir(data_dir: Path) -> Path:
    return data_dir / "secrets"


def read_or_create(data_dir: Path, name: str, make=lambda: _random.token_urlsafe(32)) -> str:
    """The secret in DATA_DIR/secrets/<name>, made with `make` the first time. Two processes racing
    to make it agree: the file is created exclusively and the loser reads the winner's."""
    folder = secrets_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path)
    with os.fdopen(fd, "w") as fh:
        fh.write(make())
    return _read(path)


def _read(path: Path) -> str:
    for _ in range(50):  # the creator may not have written it yet
        value = path.read_text().strip()
        if value:
            return value
        time.sleep(0.02)
    raise OSError(f"{path} is empty: delete it and start again")
