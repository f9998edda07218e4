"""Crash-safe files of the metadata tables (the I/O half of metadata/store.py).

`write_durably` is the one way a table reaches the disk: write `<name>.tmp`, fsync it,
rename it over `<name>`, fsync the directory. A crash at any step leaves the old file or
the new one whole under `<name>`, never a torn one; a `.tmp` left behind is never read
(`read_document` removes it). `crash_point` lets a test stop the write after a named step,
as a crash there would.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import MetadataWriteFailed

log = logging.getLogger(__name__)

#: RocketMQ's file names (store/config/…) under the broker's data directory.
TOPICS_FILE = Path("config") / "topics.json"
GROUPS_FILE = Path("config") / "subscriptionGroup.json"
REQUEST_MODES_FILE = Path("config") / "messageRequestMode.json"
#: A table's file is at most this large (10,000 configs of ~300 bytes fit).
MAX_FILE_BYTES = 64 << 20

#: Steps of a write a crash may follow ("written": the temp file is whole and fsynced;
#: "renamed": the new file has its name, the directory not yet fsynced).
CrashPoint = Callable[[str], None]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(
    path: Path, document: dict[str, Any], crash_point: CrashPoint | None = None
) -> None:
    """Replace `path` with `document` (JSON) durably; MetadataWriteFailed if it could not be."""
    data = json.dumps(document, sort_keys=True, indent=1).encode()
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if crash_point is not None:
            crash_point("written")
        os.replace(tmp, path)
        if crash_point is not None:
            crash_point("renamed")
        _fsync_dir(path.parent)
    except OSError as exc:
        raise MetadataWriteFailed(f"writing {path} failed: {exc}") from exc


def read_document(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path` (None: no file). A stray `.tmp` (a write a crash stopped)
    is removed unread. A file that is not a JSON object is moved aside to
    `<name>.corrupt` and None returned, loudly: peers' newer tables or adoption refill the
    table, and the bad file is kept for a person to read."""
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        log.warning("metadata: %s is a write a crash interrupted; removed unread", tmp)
        tmp.unlink()
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    reason: str
    try:
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{size} bytes, over {MAX_FILE_BYTES}")
        data = json.loads(path.read_bytes())
        if isinstance(data, dict):
            return data
        reason = "not a JSON object"
    except (ValueError, UnicodeDecodeError) as exc:
        reason = str(exc)
    set_aside(path, reason)
    return None


def set_aside(path: Path, reason: str) -> None:
    """Move an unusable table file to `<name>.corrupt` (kept for a person), loudly."""
    aside = path.with_name(path.name + ".corrupt")
    os.replace(path, aside)
    _fsync_dir(path.parent)
    log.error("metadata: %s is unusable (%s); moved to %s, starting without it", path,
              reason[:200], aside)  # fmt: skip
