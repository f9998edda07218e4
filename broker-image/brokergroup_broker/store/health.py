"""Whether the store takes writes (DESIGN.md §3.4b): the one owner of "closed", the
sticky fatal error, the space error that clears itself and the disk usage ratio.

Errors: a failed write is rolled back and reported by `writable()`; ENOSPC clears
itself once space is back, any other I/O error (notably a failed fdatasync, after
which the page cache can no longer be trusted) sticks until the store is reopened.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .config import StoreConfig
from .errors import StoreBusy, StoreClosed, StoreError, StoreIOError, StoreNotWritable

log = logging.getLogger(__name__)

_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE)
#: How long a statvfs answer (disk usage ratio) is reused. writable() runs twice per
#: produce; one statvfs per call was ~2% of the master's CPU under load. A write
#: that fills the disk faster than this still fails cleanly (ENOSPC -> _space_error).
_DISK_USAGE_TTL_S = 0.1


@dataclass(frozen=True)
class DiskSpace:
    """The store's filesystem in bytes, as statvfs gives it."""

    total: int
    free: int
    """Free blocks, root's reserve included (Java's File.getFreeSpace)."""
    usable: int
    """What a non-root process can still write (File.getUsableSpace)."""

    @classmethod
    def from_statvfs(cls, st: os.statvfs_result) -> DiskSpace:
        return cls(st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize)

    @property
    def used(self) -> int:
        return self.total - self.free

    @property
    def used_ratio(self) -> float:
        """df's Use% and RocketMQ's `UtilAll.getDiskPartitionSpaceUsedPercent` (unrounded):
        used over used + usable. Root's reserve counts as neither, so a filesystem with a
        large reserve is not "full" while the broker can still write, and the ratio reaches
        1.0 exactly when the broker's writes would get ENOSPC."""
        whole = self.used + self.usable
        return 0.0 if whole <= 0 else self.used / whole


class StoreHealth:
    """Closed / fatal / out of space, for one store root."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self._root = root
        self._config = config
        self._closed = False
        self._fatal_error: str | None = None
        self._space_error: tuple[str, int] | None = None  # (reason, bytes that did not fit)
        self._disk_usage: tuple[float, float] | None = None  # (monotonic s, ratio)
        self._over_disk_full_ratio = False  # for logging the change, once each way

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fatal_error(self) -> str | None:
        return self._fatal_error

    def mark_closed(self) -> None:
        self._closed = True

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosed(str(self._root))

    def disk_space(self) -> DiskSpace:
        return DiskSpace.from_statvfs(os.statvfs(self._root))

    def disk_usage_ratio(self) -> float:
        now = time.monotonic()
        cached = self._disk_usage
        if cached is not None and now - cached[0] < _DISK_USAGE_TTL_S:
            return cached[1]
        ratio = self.disk_space().used_ratio
        self._disk_usage = (now, ratio)
        return ratio

    def writable(self) -> tuple[bool, str | None]:
        """The store's one verdict: does it take writes, and if not, why. Heartbeats (what
        the controller elects on), /readyz and produce admission all read this, so the
        three never disagree (DESIGN.md §3.4a)."""
        if self._closed:
            return False, "store is closed"
        if self._fatal_error is not None:
            return False, self._fatal_error
        try:
            ratio = self.disk_usage_ratio()
        except OSError as exc:
            return False, f"disk usage of {self._root} unknown: {exc.strerror or exc}"
        # Full means strictly above the ratio, as RocketMQ 5's
        # DefaultMessageStore.CleanCommitLogService.isSpaceFull decides it
        # (`physicRatio > getDiskSpaceWarningLevelRatio()` marks the disk full):
        # a disk at exactly diskFullRatio still takes writes.
        over = ratio > self._config.disk_full_ratio
        if over != self._over_disk_full_ratio:
            self._over_disk_full_ratio = over
            if over:
                log.warning("store %s: disk usage %.1f%% is above diskFullRatio %.1f%%: "
                            "refusing writes until space is freed", self._root,
                            100 * ratio, 100 * self._config.disk_full_ratio)  # fmt: skip
            else:
                log.info("store %s: disk usage %.1f%% is back under diskFullRatio; "
                         "accepting writes", self._root, 100 * ratio)  # fmt: skip
        if over:
            return False, (
                f"disk usage {ratio:.1%} of {self._root} is above diskFullRatio "
                f"{self._config.disk_full_ratio:.1%}"
            )
        if self._space_error is not None:
            reason, needed = self._space_error
            st = os.statvfs(self._root)
            if st.f_bavail * st.f_frsize < 2 * needed + (1 << 20):
                return False, reason
            log.info("store %s: space is available again; accepting writes", self._root)
            self._space_error = None
        return True, None

    def check_writable(self) -> None:
        ok, reason = self.writable()
        if not ok:
            raise StoreNotWritable(reason or "unknown")

    def fail(self, reason: str) -> None:
        """Stop taking writes until the store is reopened (log and index disagree)."""
        self._fatal_error = reason
        log.error("store %s: %s", self._root, reason)

    def io_failed(self, what: str, exc: OSError, size: int, *, fsync: bool = False) -> StoreError:
        """The error to raise for a failed write or sync, and what it does to writability."""
        reason = f"{what} failed: {exc.strerror or exc} (errno {exc.errno})"
        if fsync:
            # After a failed fsync the kernel may have dropped the dirty pages and a
            # retry would "succeed" without them: whatever the errno (ENOSPC, EDQUOT,
            # EIO), the unflushed tail is lost. Stop for good: the controller fails
            # this broker over and a restart recovers from what is on disk.
            self.fail(
                f"{reason}; unflushed data may be lost, so this store takes no more writes: "
                "restart the broker to recover from disk"
            )
            return StoreIOError(self._fatal_error or reason)
        if exc.errno in _RESOURCE_ERRNOS:
            # Out of descriptors: this request fails, the disk is fine (no failover).
            log.warning("store %s: %s (a resource limit, not a disk fault)", self._root, reason)
            return StoreBusy(reason)
        if exc.errno in _SPACE_ERRNOS:
            self._space_error = (reason, size)
        else:
            self._fatal_error = reason + "; reopen the store after fixing the disk"
        log.error("store %s: %s", self._root, reason)
        return StoreIOError(reason)
