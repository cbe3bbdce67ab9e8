"""DATA_DIR, read as another account on the machine would: the SQLite store (API key hashes, every
conversation) and the logs used to be created 0644, readable by anyone. Now the services, the
`ragmesh` command and `make run`'s supervisor create files 0600 and folders 0700, and take away
what an earlier version left readable, when they start."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security import processes

pytestmark = pytest.mark.slow


def readable_by_others(root: Path) -> list[str]:
    """Every file and folder below `root` (itself excluded) that its group or others may use."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found


def test_the_store_secrets_and_logs_are_private_after_the_cli_and_a_service_ran(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "logs").mkdir(parents=True)
    old_log = data_dir / "logs" / "retriever.log"  # what an earlier version left behind
    old_log.write_text("a line with a user's question\n")
    os.chmod(data_dir / "logs", 0o755)
    os.chmod(old_log, 0o644)
    made = processes.cli(data_dir, "keys", "create", "--tenant", "acme", "--user", "root", "--role", "admin")
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((data_dir / "ragmesh.sqlite3").stat().st_mode) == 0o600
    service = processes.start("generator", data_dir)
    service.stop()
    assert readable_by_others(data_dir) == []
    assert stat.S_IMODE(old_log.stat().st_mode) == 0o600 and old_log.read_text().startswith("a line")


def test_the_supervisors_logs_are_private(tmp_path: Path) -> None:
    """`make run` whose embedder cannot start (the Gemini backend with no key, which only the embedder's
    settings refuse): it stops at once, having written its logs."""
    data_dir = tmp_path / "data"
    env = processes.env(data_dir, EMBED_BACKEND="gemini", GEMINI_API_KEY="", GOOGLE_API_KEY="")
    run = subprocess.run([sys.executable, "-m", "deploy.run"], env=env,
                         cwd=processes.ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "embedder exited" in run.stderr, run.stderr
    logs = sorted(p.name for p in (data_dir / "logs").iterdir())
    assert logs == ["embedder.log", "supervisor.log"], logs
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert readable_by_others(data_dir) == []
