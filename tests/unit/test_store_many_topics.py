"""10,000 topics with few file descriptors (issue 7 item 7, DESIGN.md §3.4b).

Each topic's consume queue is a file. Keeping them all open used to exhaust
the process's descriptors; the EMFILE was then taken for a broken disk, the
store refused every write and could not reopen. Here a child process with
RLIMIT_NOFILE 256 (a real limit, not a mock) writes one message to each of
10,000 topics, with the open-file bound both below and above the limit
(above it, the store keeps to half the descriptor limit), reopens the
store and reads every message back; the 10,001st topic is refused with a
clear error while existing topics still take writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from brokergroup_broker.store import MessageStore, StoreConfig, FlushDiskType
from brokergroup_broker.store.errors import TopicLimitReached

root, max_open = Path(sys.argv[1]), int(sys.argv[2])
cfg = StoreConfig(commit_log_segment_bytes=1 << 24, flush_disk_type=FlushDiskType.ASYNC_FLUSH,
                  max_topics=10_000, max_open_queue_files=max_open)
host = ("127.0.0.1", 10911)
out = {}
with MessageStore.open(root, cfg) as store:
    for i in range(10_000):
        store.put_run(f"topic-{i}", 0, [b"body-%d" % i], None, store_host=host,
                      born_host=host, now_ms=1)
    out["writable"] = store.writable()[0]
    out["open_files"] = len(store.queues.fds)
    try:
        store.put_run("one-too-many", 0, [b"x"], None, store_host=host, born_host=host, now_ms=2)
        out["limit"] = None
    except TopicLimitReached as exc:
        out["limit"] = str(exc)
    store.put_run("topic-7", 0, [b"again"], None, store_host=host, born_host=host, now_ms=3)
    store.flush()
with MessageStore.open(root, cfg) as store:
    bodies = [bytes(m.body) for i in range(10_000)
              for m in store.get_messages(f"topic-{i}", 0, 0, 5, store.max_offset)]
    out["bodies_ok"] = bodies[:8] + bodies[8:] == [
        b for i in range(10_000) for b in ([b"body-%d" % i] + ([b"again"] if i == 7 else []))
    ]
    out["reopened_writable"] = store.writable()[0]
print(json.dumps(out))
"""


@pytest.mark.parametrize("max_open", [128, 1024])
def test_ten_thousand_topics_with_256_descriptors(tmp_path: Path, max_open: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "store"), str(max_open)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["writable"] is True
    # Never more than asked, nor more than half the descriptor limit.
    assert out["open_files"] <= min(max_open, 128)
    assert out["limit"] is not None and "maxTopics 10000" in out["limit"]
    assert out["bodies_ok"] is True and out["reopened_writable"] is True
