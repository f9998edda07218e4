"""Where the audit's inputs and outputs live: a local path, or a URI of a store pyarrow
opens (s3://, gs://, abfs://, hdfs://, file://), through `pyarrow.fs`.

A location crosses from the driver to the executors as a string, so it must mean the
same thing on every machine: the driver makes a local path absolute before anything
leaves it (`on_driver`); a URI is already absolute. Credentials are never part of a
location: each store's client finds its own the usual way on the machine it runs on
(S3: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role; the
endpoint of an S3-compatible server: AWS_ENDPOINT_URL, or `?endpoint_override=` in
the URI; GCS: application default credentials; Azure: AZURE_STORAGE_ACCOUNT_NAME with
a key or a token in the environment; HDFS: the Hadoop configuration and libhdfs).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from pyarrow import fs

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


def is_uri(location: str) -> bool:
    return _SCHEME.match(location) is not None


def on_driver(location: str, cwd: Path) -> str:
    """`location` as every executor must see it: a URI unchanged, a local path absolute
    against the driver's working directory `cwd` (a standalone worker's executor runs
    in work/app-…/N, where a relative path names nothing)."""
    if is_uri(location):
        return location
    return os.path.normpath(os.path.join(cwd, location))


def resolve(location: str) -> tuple[fs.FileSystem, str]:
    """The filesystem holding `location` and its path in it."""
    if not is_uri(location):
        return fs.LocalFileSystem(), os.path.abspath(location)
    return _from_uri(location)


@functools.lru_cache(maxsize=32)
def _from_uri(location: str) -> tuple[fs.FileSystem, str]:
    """Cached: an executor opens the store's filesystem once, not once per slice
    (building an S3 client costs milliseconds and may look up the bucket's region)."""
    try:
        filesystem, path = fs.FileSystem.from_uri(location)
    except (ValueError, OSError) as exc:
        raise ValueError(f"cannot open {_public(location)}: {exc}") from exc
    return filesystem, path.rstrip("/") or path


def is_local(filesystem: fs.FileSystem) -> bool:
    return isinstance(filesystem, fs.LocalFileSystem)


def display(location: str, path: str) -> str:
    """How a path inside `location`'s filesystem is shown (summary, messages): local
    paths as they are, others with their scheme and without the URI's query."""
    m = _SCHEME.match(location)
    if m is None or m["scheme"] == "file":
        return path
    return f"{m['scheme']}://{path}"


def _public(location: str) -> str:
    """The location without its query (which may configure a client)."""
    return location.split("?", 1)[0]


def read_bytes(filesystem: fs.FileSystem, path: str) -> bytes:
    with filesystem.open_input_stream(path) as f:
        return bytes(f.read())


def read_text(location: str) -> str:
    filesystem, path = resolve(location)
    return read_bytes(filesystem, path).decode("utf-8")


def write_bytes(filesystem: fs.FileSystem, path: str, data: bytes) -> None:
    with filesystem.open_output_stream(path) as f:
        f.write(data)


def join(path: str, *parts: str) -> str:
    """A path inside a filesystem (pyarrow's paths use '/' on every store)."""
    return "/".join([path.rstrip("/"), *parts])
