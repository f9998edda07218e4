"""StoreCheckpoint (DESIGN.md §3.1, §3.3): what recovery and the commit rule persist.

File `<root>/storeCheckpoint`, properties text written with temp + fsync +
rename (+ directory fsync):

    # brokergroup store checkpoint
    recoverOffset=<commit log offset>
    confirmOffset=<commit log offset>

- `recoverOffset`: a record boundary such that every commit log byte before it
  and every consume queue entry of those records was fsynced when the file was
  written. Recovery verifies records from here and rebuilds consume queues
  from here; everything before it is trusted.
- `confirmOffset`: the last confirmOffset the owner persisted (§3.3); recovery
  clamps it to the recovered end of the log.

(Not RocketMQ's binary `checkpoint` file: a different name so nobody mistakes one for the other.)
"""

from __future__ import annotations

import logging
from pathlib import Path

from ._fileio import atomic_write, format_properties, read_properties

log = logging.getLogger(__name__)

CHECKPOINT_FILE_NAME = "storeCheckpoint"


class StoreCheckpoint:
    def __init__(self, path: Path, recover_offset: int = 0, confirm_offset: int = 0) -> None:
        self.path = path
        self.recover_offset = recover_offset
        self.confirm_offset = confirm_offset
        self.loaded_from_disk = False

    @classmethod
    def load(cls, root: Path) -> StoreCheckpoint:
        path = root / CHECKPOINT_FILE_NAME
        cp = cls(path)
        if not path.exists():
            return cp
        try:
            values = read_properties(path.read_text())
            cp.recover_offset = int(values["recoverOffset"])
            cp.confirm_offset = int(values["confirmOffset"])
            cp.loaded_from_disk = True
        except (OSError, ValueError, KeyError) as exc:
            # Only costs a longer recovery scan: recovery falls back to the first segment.
            log.warning("store checkpoint %s unreadable (%s); recovering from the start", path, exc)
        return cp

    def set_confirm_offset(self, offset: int, *, persist: bool = False) -> None:
        self.confirm_offset = offset
        if persist:
            self.save()

    def save(self) -> None:
        atomic_write(
            self.path,
            format_properties(
                "brokergroup store checkpoint",
                {
                    "recoverOffset": str(self.recover_offset),
                    "confirmOffset": str(self.confirm_offset),
                },
            ),
        )
