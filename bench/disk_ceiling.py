"""Disk ceiling: sequential write+fdatasync MB/s and 4 KiB write+fdatasync ops/s.

Usage: python bench/disk_ceiling.py [--dir DIR] [--quick]
Measures in a temp dir under DIR (default: bench/results, i.e. this repo's
filesystem), prints one JSON line and writes bench/results/disk_ceiling.json.
Other benchmarks import `measure_disk_ceiling` from brokergroup_broker.store.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from brokergroup_broker.store.ceiling import measure_disk_ceiling

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="smaller sample (about 1 s)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.quick:
        ceiling = measure_disk_ceiling(args.dir, seq_total_bytes=32 << 20, small_ops=300)
    else:
        ceiling = measure_disk_ceiling(args.dir)
    result = {"benchmark": "disk_ceiling", **ceiling.as_dict()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "disk_ceiling.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
