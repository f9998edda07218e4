#!/usr/bin/env python3
"""RocketMQ's own benchmark producer and consumer (issue 38 item 4), for bench/rocketmq_benchmark.py.

    python tools/rocketmq/benchmark_programs.py build   # compiles; prints the classes directory

The programs are apache/rocketmq's `example/src/main/java/org/apache/rocketmq/example/
benchmark/{Producer,Consumer,AclClient}.java` at tag rocketmq-all-5.3.1 (commit
b122c8109d62d7dbdacbb36f2b9c9efa49f9b859), kept unchanged under tools/rocketmq/benchmark/
(Apache License 2.0, their headers kept): Maven Central publishes no rocketmq-example jar.
`build` compiles them against the stock client jars `tools/rocketmq/fetch.sh` caches
(rocketmq-client/acl/srvutil 5.3.1 with commons-cli and commons-lang3, outside the
repository) into <home>/benchmark/<digest>, again only when a source changed.

Their output is their own: every `-ri` ms (after 10 one-second snapshots) a line over the
last ~10 s, `Send TPS`, `Average RT(ms)`, `Max RT(ms)` (since the start), `Send Failed` for
the producer, `Consume TPS`, `AVG(B2C) RT(ms)` (born to consumed), `AVG(S2C) RT(ms)` (stored to
consumed) for the consumer. `parse_report` reads one such line; `BenchmarkProgram` runs one
program and hands each report to the caller as it is printed.

Stdlib only, like stock_client.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from stock_client import CLIENT_JVM, compile_sources, rocketmq_home  # noqa: E402

SOURCES = HERE / "benchmark"
PACKAGE = "org.apache.rocketmq.example.benchmark"
UPSTREAM = "apache/rocketmq rocketmq-all-5.3.1 (b122c8109d62d7dbdacbb36f2b9c9efa49f9b859)"

_PRODUCER = re.compile(
    r"Send TPS: (?P<tps>\d+) \| Max RT\(ms\): (?P<max_rt_ms>\d+) \| "
    r"Average RT\(ms\):\s*(?P<avg_rt_ms>[\d.]+|NaN) \| Send Failed: (?P<failed>\d+) \| "
    r"Response Failed: (?P<response_failed>\d+)"
)
_CONSUMER = re.compile(
    r"Consume TPS: (?P<tps>\d+) \| AVG\(B2C\) RT\(ms\):\s*(?P<avg_b2c_ms>[\d.]+|NaN) \| "
    r"AVG\(S2C\) RT\(ms\):\s*(?P<avg_s2c_ms>[\d.]+|NaN) \| MAX\(B2C\) RT\(ms\): "
    r"(?P<max_b2c_ms>\d+) \| MAX\(S2C\) RT\(ms\): (?P<max_s2c_ms>\d+) \| "
    r"Consume Fail: (?P<failed>\d+)"
)


def parse_report(line: str) -> dict[str, float] | None:
    """One periodic (or `[Complete]`) report line of Producer or Consumer, as numbers;
    None for any other line."""
    for pattern in (_PRODUCER, _CONSUMER):
        match = pattern.search(line)
        if match is not None:
            return {k: float(v) for k, v in match.groupdict().items()}
    return None


def sources() -> list[Path]:
    return sorted((SOURCES / Path(*PACKAGE.split("."))).glob("*.java"))


def build() -> Path:
    """Compile the benchmark programs (when a source changed); the classes directory."""
    return compile_sources("benchmark", sources(), quiet=True)


@dataclass
class BenchmarkProgram:
    """One run of Producer or Consumer against a name server (its own JVM, our child)."""

    program: str
    """`Producer` or `Consumer`."""
    namesrv: str
    work: Path
    options: dict[str, object]
    """The program's own options by their short names (`w`, `s`, `t`, `ri`, ...)."""
    access_key: str = ""
    secret_key: str = ""
    classes: Path = field(default_factory=build)
    reports: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """(monotonic time, report) per report line, in order."""
    lines: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        opts: dict[str, object] = {"n": self.namesrv, **self.options}
        if self.access_key:  # the program's AclClient: AclClientRPCHook with this pair
            opts |= {"a": "true", "ak": self.access_key, "sk": self.secret_key}
        argv = [part for k, v in opts.items() for part in (f"-{k}", str(v))]
        home = rocketmq_home()
        return ["java", *CLIENT_JVM, f"-Duser.home={self.work}",
                "-cp", f"{self.classes}:{home / 'lib'}/*", f"{PACKAGE}.{self.program}",
                *argv]  # fmt: skip

    def start(self, on_report: Callable[[dict[str, float]], None] | None = None) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=open(self.work / f"{self.program}.stderr", "ab"),  # noqa: SIM115
            text=True,
        )
        self._changed = threading.Condition()
        self._reader = threading.Thread(
            target=self._read, args=(self._proc.stdout, on_report), daemon=True
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _read(self, out: IO[str], on_report: Callable[[dict[str, float]], None] | None) -> None:
        with (self.work / f"{self.program}.out").open("a") as copy:
            for line in out:
                copy.write(line)
                copy.flush()
                report = parse_report(line)
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    if report is not None:
                        self.reports.append((time.monotonic(), report))
                    self._changed.notify_all()
                if report is not None and on_report is not None:
                    on_report(report)

    def wait_reports(self, count: int, timeout_s: float) -> list[dict[str, float]]:
        """Until `count` reports were printed (raises TimeoutError, or RuntimeError when the
        program exited first, with its last lines)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self.reports) < count:
                if self._proc.poll() is not None:
                    tail = "\n".join(self.lines[-20:])
                    raise RuntimeError(
                        f"{self.program} exited with {self._proc.returncode} after "
                        f"{len(self.reports)} reports; its output ends:\n{tail}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.program}: {count} reports not within {timeout_s} s")
                self._changed.wait(min(left, 1.0))
            return [r for _, r in self.reports[:count]]

    def stop(self) -> None:
        """SIGTERM (the client's shutdown hook runs), SIGKILL after 30 s."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._reader.join(timeout=10)


def mean_of(reports: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in reports if r.get(key) == r.get(key)]  # NaN != NaN
    return round(sum(values) / len(values), 3) if values else None


def main(argv: list[str]) -> int:
    if argv[1:] == ["build"]:
        print(build())
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
