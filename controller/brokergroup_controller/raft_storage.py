"""Durable Raft storage for pysyncobj (see raft_node's "Power loss"): the
journal of entries with CRCs (`DurableJournal`), its crash-safe meta file
(term, vote, commit index: CRC'd copies written temp + fsync + rename), and
snapshot files (`SnapshotStore`). The node in raft_node.py wires them in."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import struct
import zlib
from collections.abc import Callable
from typing import Any

from pysyncobj.journal import Journal

log = logging.getLogger(__name__)

Entry = tuple[bytes, int, int]  # (command, log index, term), pysyncobj's journal entry


_JOURNAL_MAGIC = b"BGJOURNAL1\n"


_RECORD = struct.Struct("<IIQQ")  # command length, crc32, index, term


_SNAP_MAGIC = b"BGSNAP1 "


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(
    path: str, data: bytes, *, fsync: bool, keep_previous_as: str | None = None
) -> None:
    """Replace `path` atomically: tmp file, fsync, rename, fsync the directory.

    With `keep_previous_as` the old content is hard-linked there first, so one
    complete copy exists under some name at every instant.
    """
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    if keep_previous_as is not None and os.path.exists(path):
        bak_tmp = f"{keep_previous_as}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(bak_tmp)
        os.link(path, bak_tmp)
        os.replace(bak_tmp, keep_previous_as)
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(os.path.dirname(path) or ".")


def encode_meta(meta: dict[str, Any]) -> bytes:
    """journal.meta: one JSON object and its CRC32 on a second line."""
    body = json.dumps(meta, sort_keys=True).encode()
    return body + b"\n" + b"%08x\n" % zlib.crc32(body)


def decode_meta(data: bytes) -> dict[str, Any] | None:
    """The meta object, or None for any torn or corrupt copy."""
    body, sep, crc = data.rstrip(b"\n").rpartition(b"\n")
    if not sep or len(crc) != 8:
        try:  # a whole file of the format before the CRC line
            legacy = json.loads(data)
        except ValueError:
            return None
        return legacy if isinstance(legacy, dict) and data.rstrip().endswith(b"}") else None
    try:
        if int(crc, 16) != zlib.crc32(body):
            return None
        meta = json.loads(body)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _crc(command: bytes, index: int, term: int) -> int:
    return zlib.crc32(command, zlib.crc32(struct.pack("<QQ", index, term)))


def _record(entry: Entry) -> bytes:
    command, index, term = entry
    return _RECORD.pack(len(command), _crc(command, index, term), index, term) + command


class DurableJournal(Journal):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj `Journal` with CRC'd records, group fsync and atomic truncation.

    `add` only buffers; `sync` writes the buffer and (with fsync) fdatasyncs.
    The node calls `sync` before every outgoing message and every tick, so
    nothing is acknowledged before it is durable. A torn or corrupt tail
    (power loss) is cut off at load.
    """

    def __init__(self, directory: str, *, fsync: bool) -> None:
        self._dir = directory
        self._path = os.path.join(directory, "journal.log")
        self._meta_path = os.path.join(directory, "journal.meta")
        self._fsync = fsync
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._pending = bytearray()
        self._dirty = False
        self._meta: dict[str, Any] = {}
        self._meta_dirty = False
        self.on_truncated: Callable[[int], None] | None = None
        os.makedirs(directory, exist_ok=True)
        self._load_meta()
        self._fd = self._load()

    # -- loading

    def _load_meta(self) -> None:
        """The newest intact copy among journal.meta, .bak and a leftover .tmp.

        Each copy carries a CRC. A crash while saving leaves the new copy whole
        (fsync before rename) or the previous one in place and in `.bak`, so the
        candidate with the highest term is current; within a term the vote never
        changes, so its vote is right too.
        """
        candidates = []
        found_any = False
        for path in (self._meta_path, self._meta_path + ".tmp", self._meta_path + ".bak"):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            found_any = True
            meta = decode_meta(data)
            if meta is None:
                log.warning(
                    "Raft meta copy %s is torn or corrupt (%d bytes); ignored", path, len(data)
                )
                continue
            candidates.append(meta)
        if candidates:
            self._meta = max(
                candidates,
                key=lambda m: (int(m.get("currentTerm", 0)), int(m.get("commitIndex", 0))),
            )
        else:
            if found_any:
                # Only without raftFsync (documented as not power-loss safe).
                log.error(
                    "no intact Raft meta in %s: starting from the journal's last term with no "
                    "vote recorded (raftFsync=false does not survive power loss)",
                    self._dir,
                )
            self._meta = {}

    def _load(self) -> int:
        if not os.path.exists(self._path):
            write_durable(self._path, _JOURNAL_MAGIC, fsync=self._fsync)
        with open(self._path, "rb") as f:
            data = f.read()
        if not data.startswith(_JOURNAL_MAGIC):
            raise RuntimeError(f"{self._path} is not a brokergroup journal")
        pos = len(_JOURNAL_MAGIC)
        while pos + _RECORD.size <= len(data):
            length, crc, index, term = _RECORD.unpack_from(data, pos)
            end = pos + _RECORD.size + length
            command = data[pos + _RECORD.size : end]
            if end > len(data) or _crc(command, index, term) != crc:
                break
            if self._entries and index != self._entries[-1][1] + 1:
                break
            self._entries.append((command, index, term))
            self._offsets.append(pos)
            pos = end
        fd = os.open(self._path, os.O_RDWR)
        if pos < len(data):
            log.warning(
                "journal %s: cutting a torn or corrupt tail at byte %d of %d (%d entries kept)",
                self._path,
                pos,
                len(data),
                len(self._entries),
            )
            os.ftruncate(fd, pos)
            if self._fsync:
                os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        self._size = pos
        return fd

    # -- pysyncobj Journal interface (Raft thread only)

    def add(self, command: bytes, idx: int, term: int) -> None:
        entry = (bytes(command), int(idx), int(term))
        self._offsets.append(self._size + len(self._pending))
        self._entries.append(entry)
        self._pending += _record(entry)
        self._dirty = True

    def clear(self) -> None:
        self._rewrite([])

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        self._write_pending()
        cut = self._offsets[entryFrom]
        os.ftruncate(self._fd, cut)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._size = cut
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._rewrite(self._entries[entryTo:])
        if self.on_truncated is not None and self._entries:
            self.on_truncated(self._entries[0][1])

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        with contextlib.suppress(OSError):
            self.sync()
            self._save_meta(durable=self._fsync)
            os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commitIndex") != raftCommitIndex:
            self._meta["commitIndex"] = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("commitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # Raft: currentTerm/votedFor must be durable before the vote leaves.
        self._meta["currentTerm"] = int(term)
        self._meta["votedFor"] = None if votedForNodeId is None else str(votedForNodeId)
        self._save_meta(durable=self._fsync)

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> str | None:
        voted = self._meta.get("votedFor")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        # The commit index is only a hint for replay, but the file also holds the
        # term and vote: a rename of an unsynced copy could leave an empty file.
        if self._meta_dirty:
            self._save_meta(durable=self._fsync)

    # -- ours

    def sync(self) -> None:
        """Make every added entry reach the kernel, and the disk with fsync."""
        if not self._dirty:
            return
        self._write_pending()
        if self._fsync:
            os.fdatasync(self._fd)
        self._dirty = False

    def _write_pending(self) -> None:
        if not self._pending:
            return
        view = memoryview(self._pending)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(self._pending)
        self._pending = bytearray()

    def _save_meta(self, *, durable: bool) -> None:
        write_durable(
            self._meta_path,
            encode_meta(self._meta),
            fsync=durable,
            keep_previous_as=self._meta_path + ".bak",
        )
        self._meta_dirty = False

    def _rewrite(self, entries: list[Entry]) -> None:
        """Atomic replacement: the old or the new journal survives any crash."""
        body = bytearray(_JOURNAL_MAGIC)
        offsets = []
        for entry in entries:
            offsets.append(len(body))
            body += _record(entry)
        write_durable(self._path, bytes(body), fsync=self._fsync)
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDWR)
        os.lseek(self._fd, 0, os.SEEK_END)
        self._entries = list(entries)
        self._offsets = offsets
        self._size = len(body)
        self._pending = bytearray()
        self._dirty = False


def _entry_to_json(entry: Entry) -> list[Any]:
    return [base64.b64encode(entry[0]).decode(), entry[1], entry[2]]


def _entry_from_json(raw: list[Any]) -> Entry:
    return (base64.b64decode(raw[0]), int(raw[1]), int(raw[2]))


def encode_snapshot(prev: Entry, last: Entry, state: dict[str, Any]) -> bytes:
    body = json.dumps(
        {"format": 1, "prev": _entry_to_json(prev), "last": _entry_to_json(last), "state": state},
        sort_keys=True,
    ).encode()
    return _SNAP_MAGIC + f"{zlib.crc32(body):08x}\n".encode() + body


def decode_snapshot(data: bytes) -> tuple[Entry, Entry, dict[str, Any]]:
    """Inverse of `encode_snapshot`; ValueError if torn or corrupt."""
    header_end = len(_SNAP_MAGIC) + 9
    if not data.startswith(_SNAP_MAGIC) or len(data) < header_end:
        raise ValueError("not a brokergroup snapshot")
    body = data[header_end:]
    if f"{zlib.crc32(body):08x}" != data[len(_SNAP_MAGIC) : header_end - 1].decode():
        raise ValueError("snapshot checksum mismatch")
    doc = json.loads(body)
    return _entry_from_json(doc["prev"]), _entry_from_json(doc["last"]), doc["state"]


class SnapshotStore:
    """Versioned, durable snapshots `snap-<first journal index>.json`."""

    def __init__(self, directory: str, *, fsync: bool, keep: int) -> None:
        self._dir = directory
        self._fsync = fsync
        self._keep = max(2, keep)
        os.makedirs(directory, exist_ok=True)

    def _indexes(self) -> list[int]:
        found = []
        for name in os.listdir(self._dir):
            if name.startswith("snap-") and name.endswith(".json"):
                with contextlib.suppress(ValueError):
                    found.append(int(name[5:-5]))
        return sorted(found)

    def _path(self, index: int) -> str:
        return os.path.join(self._dir, f"snap-{index:020d}.json")

    def save(self, data: bytes, first_index: int) -> None:
        write_durable(self._path(first_index), data, fsync=self._fsync)

    def find(self, first_entry: Entry) -> bytes | None:
        """The snapshot whose boundary entry is the journal's first entry."""
        path = self._path(first_entry[1])
        try:
            with open(path, "rb") as f:
                data = f.read()
            prev, _, _ = decode_snapshot(data)
        except (OSError, ValueError) as exc:
            log.warning("snapshot %s unusable: %s", path, exc)
            return None
        return data if prev == first_entry else None

    def prune(self, journal_first_index: int) -> None:
        """Keep the newest few, and always the one the journal starts at."""
        indexes = self._indexes()
        for index in indexes[: -self._keep]:
            if index != journal_first_index:
                with contextlib.suppress(OSError):
                    os.remove(self._path(index))
