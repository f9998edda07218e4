"""The cluster tier kubelet's log endpoint splits a container's log file into
runs (tests/cluster/tier/logserver.py): the current log is the last run,
`previous` the one before — as a kubelet answers `kubectl logs [--previous]`."""

from __future__ import annotations

from tests.cluster.tier.logserver import runs_of


def test_runs_of_a_log_file() -> None:
    log = (
        b"--- start #1 at t1 on 10.244.0.2\nfirst\n--- start #2 at t2 on 10.244.0.2\nsecond\nmore\n"
    )
    assert runs_of(log) == [
        b"--- start #1 at t1 on 10.244.0.2\nfirst\n",
        b"--- start #2 at t2 on 10.244.0.2\nsecond\nmore\n",
    ]
    assert runs_of(b"") == []
    assert runs_of(b"no marker\n") == [b"no marker\n"]
    assert runs_of(b"--- start #1 at t\n") == [b"--- start #1 at t\n"]
