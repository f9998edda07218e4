"""A fresh recording from the stock RocketMQ client decodes like the checked-in golden frames.

Runs tools/rocketmq/record_golden.py into a temporary directory: the stock 5.3.1 client
(tools/rocketmq/GoldenClient.java, from the jars tools/rocketmq/fetch.sh caches outside the
repository) sends every kind of request in both serializations to the Python recorder on
127.0.0.1. Then, for every new frame:
- the Python codec decodes it exactly as the stock Java RemotingCommand.decode does;
- it re-encodes to the same bytes;
- it agrees with the checked-in frame of the same kind on everything that does not change
  between recordings (code, flags, language, version, every extField but the timestamp, the
  message's unique key and the signature over them; the bodies);
- the signed ones verify with the manifest's key pair.
Skips, saying why, where Java is missing or the jars were never fetched (the unit tests
need neither: they use the checked-in frames).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brokergroup_remoting import decode, encode, verify
from tests.rocketmq_golden import frame_bytes, java_view, manifest, stable_view

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VERSION = "5.3.1"


def _cached_jars() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    home = Path(
        os.environ.get(
            "BROKERGROUP_ROCKETMQ_HOME", Path(root) / "brokergroup" / "rocketmq" / VERSION
        )
    )
    return home / "lib" / ".complete"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the stock RocketMQ client cannot run")
    if not _cached_jars().exists():
        pytest.skip(
            f"RocketMQ {VERSION} jars not cached ({_cached_jars().parent}): run tools/rocketmq/fetch.sh"
        )
    out = tmp_path_factory.mktemp("golden")
    subprocess.run(
        [sys.executable, str(REPO / "tools" / "rocketmq" / "record_golden.py"), "--out", str(out)],
        check=True,
        timeout=300,
    )
    return out


def test_fresh_recording_decodes_like_java_and_like_the_golden_frames(fresh: Path) -> None:
    recorded = manifest(fresh)
    golden = {frame["file"]: frame for frame in manifest()["frames"]}
    assert [frame["file"] for frame in recorded["frames"]] == list(golden)
    for frame in recorded["frames"]:
        raw = frame_bytes(frame["file"], fresh)
        cmd = decode(raw)
        java = dict(frame["java"])
        del java["file"]
        assert java_view(cmd) == java, frame["file"]
        assert encode(cmd) == raw, frame["file"]
        assert stable_view(cmd) == stable_view(decode(frame_bytes(frame["file"]))), frame["file"]
        if "signed" in frame["file"]:
            assert verify(cmd, {recorded["accessKey"]: recorded["secretKey"]}.get).ok
