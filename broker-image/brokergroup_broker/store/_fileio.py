"""Small durable-file helpers shared by the store's metadata files.

`atomic_write` is the one way metadata reaches the disk: write a temporary
file, fsync it, rename it over the target, fsync the directory. A crash at any
point leaves either the old or the new content, never a mix.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """pwrite until every byte is written (pwrite may write fewer bytes than asked)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        position += n
        view = view[n:]


def atomic_write(path: Path, data: bytes, *, keep_previous_as: Path | None = None) -> None:
    """Replace `path` with `data` durably; optionally keep the old content at `keep_previous_as`.

    The previous file is hard-linked to `keep_previous_as` before the rename, so
    at every instant at least one complete copy exists under one of the names.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_previous_as is not None and path.exists():
        bak_tmp = keep_previous_as.with_name(keep_previous_as.name + ".tmp")
        if bak_tmp.exists():
            bak_tmp.unlink()
        os.link(path, bak_tmp)
        os.replace(bak_tmp, keep_previous_as)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_properties(text: str) -> dict[str, str]:
    """Parse `key=value` lines; `#` starts a comment line. No escapes (values are simple)."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"line {raw!r} is not key=value")
        result[key.strip()] = value.strip()
    return result


def format_properties(header: str, values: dict[str, str]) -> bytes:
    lines = [f"# {header}"] + [f"{k}={v}" for k, v in values.items()]
    return ("\n".join(lines) + "\n").encode()
