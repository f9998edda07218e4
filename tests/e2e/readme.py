"""The README's Kubernetes quick start as a script (no cluster needed to read it).

The block is the one fenced ```sh block right after the marker comment
`<!-- quick-start: … -->`; the e2e tier runs it as written
(tests/e2e/test_readme_quick_start.py) and tests/unit/test_readme_quick_start.py
checks it parses and does what the README says, so the README and the test
cannot drift.
"""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- quick-start:"


def quick_start_block(readme: str) -> str:
    """The shell text of the quick-start block, exactly as written."""
    lines = readme.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
    if len(starts) != 1:
        raise ValueError(f"README.md needs exactly one {MARKER!r} line, found {len(starts)}")
    fence = starts[0] + 1
    if fence >= len(lines) or lines[fence].strip() != "```sh":
        raise ValueError("the quick-start marker must be followed by a ```sh fence")
    end = next((i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```"), None)
    if end is None:
        raise ValueError("the quick-start block is not closed")
    return "\n".join(lines[fence + 1 : end]) + "\n"


def commands(block: str) -> list[str]:
    """The block's commands in order, comments dropped, a here-document kept with
    the command that opens it (what a reader sees as one step)."""
    steps: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].split("  #", 1)[0].rstrip()
        i += 1
        if not line or line.lstrip().startswith("#"):
            continue
        if "<<'" in line:
            delimiter = line.split("<<'", 1)[1].split("'", 1)[0]
            body = []
            while i < len(lines) and lines[i] != delimiter:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            line = "\n".join([line, *body, delimiter])
        steps.append(line)
    return steps


def printed_group(stdout: str) -> dict[str, str]:
    """The first `kubectl get bg` table in the block's output: column → value."""
    lines = stdout.splitlines()
    for i, line in enumerate(lines[:-1]):
        header = line.split()
        if header[:2] == ["NAME", "MASTER"]:
            return dict(zip(header, lines[i + 1].split(), strict=False))
    raise ValueError("no `kubectl get bg` table in the output")
