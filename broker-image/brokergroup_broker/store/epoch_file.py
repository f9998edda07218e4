"""Epoch file `epochFileCheckpoint` + `.bak` (DESIGN.md §3.1, §3.2; seed controller-mode-design).

Format, byte for byte RocketMQ's CheckpointFile<EpochEntry>:

    <entry count>\\n
    <CRC32 & 0x7FFFFFFF of the entry lines, trailing newlines included>\\n
    <epoch>-<startOffset>\\n          (one line per entry, oldest first)

Each entry says "masterEpoch E started writing at commit log offset S"; the
entry's end is the next entry's start (the last one is open). Invariant:
epochs and start offsets both strictly increase down the file, so a slave can
walk them from the newest to find the truncation point.

Writes go to a temp file, fsync, rename over the main file, directory fsync;
before the rename the previous main file is hard-linked to `.bak`, so a crash
at any instant leaves one complete file. On load the main file is used if it
parses and its count and CRC match, else `.bak`; if both are corrupt the
store refuses to open (EpochFileError) rather than guess an epoch history.
"""

from __future__ import annotations

import itertools
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path

from ._fileio import atomic_write
from .errors import EpochFileError, EpochOrderError

log = logging.getLogger(__name__)

EPOCH_FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


def encode_epoch_file(entries: list[EpochEntry]) -> bytes:
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode()
    crc = zlib.crc32(body) & 0x7FFFFFFF
    return f"{len(entries)}\n{crc}\n".encode() + body


def decode_epoch_file(data: bytes) -> list[EpochEntry]:
    """Parse and verify; raises ValueError naming what is wrong."""
    text = data.decode()
    lines = text.split("\n")
    if len(lines) < 2:
        raise ValueError("fewer than two header lines")
    count = int(lines[0])
    crc = int(lines[1])
    entry_lines = lines[2 : 2 + count]
    if len(entry_lines) != count or any(not line for line in entry_lines):
        raise ValueError(f"header says {count} entries, file has {len(entry_lines)}")
    body = "".join(line + "\n" for line in entry_lines).encode()
    if zlib.crc32(body) & 0x7FFFFFFF != crc:
        raise ValueError(f"CRC {crc} does not match the entry lines")
    if any(line for line in lines[2 + count :]):
        raise ValueError("text after the last entry")
    entries: list[EpochEntry] = []
    for line in entry_lines:
        epoch, sep, start = line.partition("-")
        if not sep:
            raise ValueError(f"entry {line!r} is not epoch-startOffset")
        entries.append(EpochEntry(int(epoch), int(start)))
    for prev, cur in itertools.pairwise(entries):
        if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
            raise ValueError(f"entries {prev} then {cur} do not both increase")
    return entries


class EpochFile:
    def __init__(self, root: Path) -> None:
        self.path = root / EPOCH_FILE_NAME
        self.bak_path = root / (EPOCH_FILE_NAME + ".bak")
        self._entries = self._load()

    def _load(self) -> list[EpochEntry]:
        errors: list[str] = []
        for path in (self.path, self.bak_path):
            if not path.exists():
                errors.append(f"{path.name}: missing")
                continue
            try:
                entries = decode_epoch_file(path.read_bytes())
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                errors.append(f"{path.name}: {exc}")
                log.warning("epoch file %s unreadable: %s", path, exc)
                continue
            if path is self.bak_path:
                log.warning("epoch file: using %s (%s)", path, "; ".join(errors))
            return entries
        if all(e.endswith("missing") for e in errors):
            return []  # a new store
        raise EpochFileError(
            f"neither {self.path} nor {self.bak_path} is a valid epoch file: " + "; ".join(errors)
        )

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else 0

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def find(self, epoch: int) -> tuple[EpochEntry, int | None] | None:
        """(entry, end offset or None for the open last entry) of `epoch`."""
        for i, e in enumerate(self._entries):
            if e.epoch == epoch:
                end = self._entries[i + 1].start_offset if i + 1 < len(self._entries) else None
                return e, end
        return None

    def append(self, epoch: int, start_offset: int) -> None:
        last = self.last_entry()
        if last is not None and (epoch <= last.epoch or start_offset <= last.start_offset):
            raise EpochOrderError(epoch, start_offset, last.epoch, last.start_offset)
        self._write([*self._entries, EpochEntry(epoch, start_offset)])

    def begin_epoch(self, epoch: int, start_offset: int) -> None:
        """A new master's entry: like `append`, but an open last epoch that never wrote a
        byte (same start offset) is replaced, since it owns no data and two entries may
        not share a start offset."""
        last = self.last_entry()
        if last is not None and epoch > last.epoch and start_offset == last.start_offset:
            log.info("epoch %d at %d replaces empty epoch %d", epoch, start_offset, last.epoch)
            self._write([*self._entries[:-1], EpochEntry(epoch, start_offset)])
            return
        self.append(epoch, start_offset)

    def truncate_suffix(self, offset: int) -> None:
        """Drop entries starting at or after `offset` (log truncated to `offset`)."""
        kept = [e for e in self._entries if e.start_offset < offset]
        if len(kept) != len(self._entries):
            self._write(kept)

    def truncate_prefix(self, offset: int) -> None:
        """Drop entries that end at or before `offset` (log start moved to `offset`)."""
        kept = [
            e
            for i, e in enumerate(self._entries)
            if i + 1 == len(self._entries) or self._entries[i + 1].start_offset > offset
        ]
        if len(kept) != len(self._entries):
            self._write(kept)

    def reset(self, entries: list[EpochEntry]) -> None:
        decode_epoch_file(encode_epoch_file(entries))  # validates ordering
        self._write(list(entries))

    def _write(self, entries: list[EpochEntry]) -> None:
        atomic_write(self.path, encode_epoch_file(entries), keep_previous_as=self.bak_path)
        self._entries = entries
