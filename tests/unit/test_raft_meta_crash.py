"""Crash-safe Raft meta (DESIGN.md §11, issue 7 item 8).

journal.meta holds currentTerm, votedFor and the commit index. It used to be
rewritten every second without fsync, so a power loss could leave it empty
and the node refused to start (JSONDecodeError) with its term and vote gone.
Now every copy carries a CRC, is written temp + fsync + rename + directory
fsync, and the previous copy is kept as journal.meta.bak.

Here every state a crash can leave is built by hand — the main file cut at
every byte (with .bak holding the previous state), a leftover .tmp cut at
every byte, a whole .tmp that was never renamed — and a fresh journal must
load either the newest or the previous (term, vote), never fail, never go
back further.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from brokergroup_controller.raft_storage import DurableJournal, decode_meta, encode_meta

STATES = [(1, "127.0.2.1:9880"), (2, "127.0.2.2:9880"), (3, None), (4, "127.0.2.3:9880")]


def _readable(copy: bytes, cut: int) -> bool:
    """Which cuts of a copy still hold it whole: the body alone (read as the
    pre-CRC format, optionally with its newline) or body + CRC line."""
    body = copy.index(b"\n")
    return cut in (body, body + 1) or cut >= len(copy) - 1


def _term_vote(directory: Path) -> tuple[int, str | None]:
    journal = DurableJournal(str(directory), fsync=True)
    try:
        return journal.getCurrentTerm(), journal.getVotedForNodeId()
    finally:
        journal._destroy()


def _write_states(directory: Path) -> list[tuple[bytes, bytes | None]]:
    """Save each state in turn; returns (main, bak) bytes after each save."""
    journal = DurableJournal(str(directory), fsync=True)
    copies = []
    for i, (term, vote) in enumerate(STATES):
        journal.setRaftCommitIndex(10 * (i + 1))
        journal.onOneSecondTimer()
        journal.setCurrentTerm(term, vote)  # last: .bak then holds the previous term
        meta = directory / "journal.meta"
        bak = directory / "journal.meta.bak"
        copies.append((meta.read_bytes(), bak.read_bytes() if bak.exists() else None))
    journal.sync()
    return copies


def test_every_cut_of_the_main_copy_loads_the_newest_or_the_previous_state(tmp_path: Path) -> None:
    source = tmp_path / "source"
    copies = _write_states(source)
    main, bak = copies[-1]
    assert bak is not None
    for cut in range(len(main) + 1):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(source, d)
        (d / "journal.meta").write_bytes(main[:cut])
        (d / "journal.meta.bak").write_bytes(bak)
        got = _term_vote(d)
        # A cut that keeps the whole JSON body (only the CRC line lost) is the
        # newest state, read as the pre-CRC format; any shorter cut is ignored.
        expected = STATES[-1] if _readable(main, cut) else STATES[-2]
        assert got == expected, f"cut at {cut}/{len(main)}: {got}"
        shutil.rmtree(d)


def test_a_leftover_tmp_is_used_only_when_whole(tmp_path: Path) -> None:
    source = tmp_path / "source"
    copies = _write_states(source)
    previous, _ = copies[-2]
    newest, _ = copies[-1]
    for cut in range(len(newest) + 1):
        d = tmp_path / f"tmp{cut}"
        shutil.copytree(source, d)
        # Crash after writing the temp copy, before the rename: main is the old one.
        (d / "journal.meta").write_bytes(previous)
        (d / "journal.meta.tmp").write_bytes(newest[:cut])
        got = _term_vote(d)
        expected = STATES[-1] if _readable(newest, cut) else STATES[-2]
        assert got == expected, f"tmp cut at {cut}: {got}"
        shutil.rmtree(d)


def test_an_empty_meta_without_copies_starts_instead_of_failing(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    (d / "journal.meta").write_bytes(b"")
    assert _term_vote(d) == (0, None)


def test_codec_rejects_flipped_bytes_and_reads_the_old_format() -> None:
    data = encode_meta({"currentTerm": 7, "votedFor": "a:1", "commitIndex": 3})
    assert decode_meta(data) == {"commitIndex": 3, "currentTerm": 7, "votedFor": "a:1"}
    for i in range(len(data) - 1):  # the final newline is optional
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        assert (
            decode_meta(bytes(flipped)) != decode_meta(data) or decode_meta(bytes(flipped)) is None
        )
    assert decode_meta(b'{"currentTerm": 2, "votedFor": null}') == {
        "currentTerm": 2,
        "votedFor": None,
    }
