"""The image's promises that can be read off its files (DESIGN.md §6): one
image whose argument is the subcommand, a non-root user, a HEALTHCHECK,
nothing downloaded during the build (wheels from the context only), and a
`make image` / `make image-smoke` wired to the project's scripts. The image
itself is exercised by `make image-smoke` where a container engine runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "broker-image" / "Dockerfile").read_text()


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_runs_as_a_numeric_non_root_user_with_brokergroup_as_entrypoint() -> None:
    ins = _instructions()
    users = [rest for word, rest in ins if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    assert ("ENTRYPOINT", '["brokergroup"]') in ins
    assert any(word == "HEALTHCHECK" for word, _ in ins)


def test_the_build_installs_only_from_the_wheels_it_was_given() -> None:
    runs = " && ".join(rest for word, rest in _instructions() if word == "RUN")
    installs = [c.split("pip install", 1)[1] for c in runs.split("&&") if "pip install" in c]
    assert len(installs) == 2, installs  # the dependencies' stage, then the project's wheel
    for args in installs:
        words = args.split()
        assert "--no-index" in words, args
        targets = [w for w in words if not w.startswith("-")]
        assert targets and all(t.startswith(("/tmp/wheels/", "/tmp/project/")) for t in targets)
    assert not re.search(r"\b(curl|wget|apt-get)\b", runs)


def test_make_targets_call_the_project_scripts() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "tools/image/build.sh" in makefile and "tools/image/smoke.sh" in makefile
    for script in ("build.sh", "smoke.sh"):
        path = ROOT / "tools" / "image" / script
        assert path.stat().st_mode & 0o111, f"{script} is not executable"


def test_the_rocketmq_image_is_jdk_only_non_root_and_built_from_its_context() -> None:
    """Issue 20 item 4: stock jars from the build context (Maven Central, cached by
    fetch.sh) on the debootstrap JRE base; no RocketMQ scripts, no downloads, uid 10001."""
    text = re.sub(r"\\\n", " ", (ROOT / "broker-image" / "rocketmq.Dockerfile").read_text())
    ins = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            ins.append((word.upper(), rest.strip()))
    users = [rest for word, rest in ins if word == "USER"]
    assert users == ["10001:10001"]
    entrypoint = next(rest for word, rest in ins if word == "ENTRYPOINT")
    assert entrypoint.startswith('["java"') and "BrokerStartup" in entrypoint
    assert not re.search(r"mqbroker|runbroker|\.sh\b", " ".join(rest for _, rest in ins))
    runs = " ".join(rest for word, rest in ins if word == "RUN")
    assert not re.search(r"\b(curl|wget|apt-get|mvn)\b", runs)
    assert ("COPY", "lib/ /opt/rocketmq/lib/") in ins
    makefile = (ROOT / "Makefile").read_text()
    assert "image-rocketmq:\n\ttools/rocketmq/image.sh" in makefile
    assert (ROOT / "tools" / "rocketmq" / "image.sh").stat().st_mode & 0o111
