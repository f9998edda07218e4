"""Broker identity files (DESIGN.md §3.1, §3.4; seed persistent-broker-id).

Two files in the store root, properties text (`key=value` lines, `#` comments):

`.broker.meta.temp` (step 2.1 of the seed, before ApplyBrokerId):

    # brokergroup broker identity (temp)
    brokerId=3
    registerCode=5f0c...

`.broker.meta` (step 4.1, after the controller accepted the id):

    # brokergroup broker identity
    clusterName=C
    brokerName=B
    brokerId=3
    registerCode=5f0c...

`commit_temp` must make "temp deleted, meta created" one atomic step (the
seed's CreateMetaFileFromTemp). It first rewrites the temp file (temp + fsync +
rename) to already hold the final content, then renames `.broker.meta.temp`
to `.broker.meta` and fsyncs the directory: a crash at any point leaves
either a valid temp (retry ApplyBrokerId with the same id and registerCode)
or the final meta (normal restart), never neither. If both exist (not
produced by this code), the meta file wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ._fileio import atomic_write, format_properties, fsync_dir, read_properties
from .errors import IdentityFileError

TEMP_FILE_NAME = ".broker.meta.temp"
META_FILE_NAME = ".broker.meta"


@dataclass(frozen=True)
class TempBrokerMeta:
    broker_id: int
    register_code: str


@dataclass(frozen=True)
class BrokerMeta:
    cluster_name: str
    broker_name: str
    broker_id: int
    register_code: str = ""


class IdentityFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.temp_path = root / TEMP_FILE_NAME
        self.meta_path = root / META_FILE_NAME

    def _read(self, path: Path, required: tuple[str, ...]) -> dict[str, str] | None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise IdentityFileError(f"cannot read {path}: {exc}") from exc
        try:
            values = read_properties(text)
        except ValueError as exc:
            raise IdentityFileError(f"{path} is not key=value text: {exc}") from exc
        missing = [k for k in required if not values.get(k)]
        if missing:
            raise IdentityFileError(f"{path} lacks {', '.join(missing)}")
        try:
            int(values["brokerId"])
        except ValueError as exc:
            raise IdentityFileError(
                f"{path}: brokerId {values['brokerId']!r} is not a number"
            ) from exc
        return values

    def read_temp(self) -> TempBrokerMeta | None:
        values = self._read(self.temp_path, ("brokerId", "registerCode"))
        if values is None:
            return None
        return TempBrokerMeta(int(values["brokerId"]), values["registerCode"])

    def write_temp(self, meta: TempBrokerMeta) -> None:
        atomic_write(
            self.temp_path,
            format_properties(
                "brokergroup broker identity (temp)",
                {"brokerId": str(meta.broker_id), "registerCode": meta.register_code},
            ),
        )

    def delete_temp(self) -> None:
        try:
            self.temp_path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.root)

    def read_meta(self) -> BrokerMeta | None:
        values = self._read(self.meta_path, ("clusterName", "brokerName", "brokerId"))
        if values is None:
            return None
        return BrokerMeta(
            values["clusterName"],
            values["brokerName"],
            int(values["brokerId"]),
            values.get("registerCode", ""),
        )

    def commit_temp(self, cluster_name: str, broker_name: str) -> BrokerMeta:
        temp = self.read_temp()
        if temp is None:
            raise IdentityFileError(f"{self.temp_path} is missing: nothing to commit")
        meta = BrokerMeta(cluster_name, broker_name, temp.broker_id, temp.register_code)
        # Step 1: the temp file takes the final content (still a valid temp: same id and code).
        atomic_write(
            self.temp_path,
            format_properties(
                "brokergroup broker identity",
                {
                    "clusterName": cluster_name,
                    "brokerName": broker_name,
                    "brokerId": str(meta.broker_id),
                    "registerCode": meta.register_code,
                },
            ),
        )
        # Step 2: one rename removes the temp and creates the meta; the dir fsync makes it stick.
        os.replace(self.temp_path, self.meta_path)
        fsync_dir(self.root)
        return meta
