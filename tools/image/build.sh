#!/usr/bin/env bash
# `make image`: build the brokergroup image (broker-image/Dockerfile) with a
# reachable container engine. The image runs the broker, the controller and the
# operator, so it installs brokergroup[broker,controller,operator] (no Spark, no
# plotting: the audit and the chaos tool need [audit]; IMAGE_EXTRAS overrides).
# Wheels of the project and of those dependencies are built on the host (pip
# wheel) and copied in, so the build itself needs no network: pip inside a
# container cannot be trusted to reach PyPI (proxies, air-gapped CI).
#
#   tools/image/build.sh                       # tag brokergroup:dev, base python:3.11-slim
#   IMAGE=brokergroup:1.0 BASE_IMAGE=python:3.11-slim tools/image/build.sh
#   OFFLINE_BASE=1 tools/image/build.sh        # no registry: a Debian bookworm base built
#                                              # here with debootstrap (root), cached
#   AUDIT=1 OFFLINE_BASE=1 tools/image/build.sh  # `make audit-image`: brokergroup-audit:dev,
#         brokergroup[audit] and a Java 17 runtime for Spark (broker-image/audit/Dockerfile;
#         the offline base then also carries Debian's openjdk-17-jre-headless and tini)
#
# Exits 2 with the reason when no container engine answers (`docker info`).
set -euo pipefail
cd "$(dirname "$0")/../.."
AUDIT=${AUDIT:-0}
DOCKERFILE_DIR=broker-image
BASE_FLAVOUR=
BASE_PACKAGES=
if [ "$AUDIT" = 1 ]; then
    IMAGE=${IMAGE:-brokergroup-audit:dev}
    DOCKERFILE_DIR=broker-image/audit
    BASE_FLAVOUR=-jre17
    BASE_PACKAGES=,openjdk-17-jre-headless,procps,tini
fi
IMAGE=${IMAGE:-brokergroup:dev}
BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}
PYTHON=${PYTHON:-.venv/bin/python}
CACHE=${BROKERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup}/image

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "make image: no container engine answers (docker info failed); nothing built" >&2
    exit 2
fi

if [ "${OFFLINE_BASE:-0}" = 1 ]; then
    BASE_IMAGE=brokergroup-base:bookworm-py311$BASE_FLAVOUR-slim
    if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        MIRROR=${MIRROR:-http://deb.debian.org/debian}
        rootfs="$CACHE/rootfs-bookworm$BASE_FLAVOUR"
        if [ ! -x "$rootfs/usr/bin/python3" ]; then
            command -v debootstrap >/dev/null || { echo "OFFLINE_BASE needs debootstrap" >&2; exit 2; }
            rm -rf "$rootfs" && mkdir -p "$rootfs"
            echo "debootstrap bookworm (python3, venv$BASE_PACKAGES) into $rootfs"
            debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd$BASE_PACKAGES \
                bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap$BASE_FLAVOUR.log" 2>&1
            rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        fi
        # Slim, as Debian's -slim images are: no manuals, translations or docs but the
        # copyright files (~50 MB of the ~180 MB rootfs).
        (cd "$rootfs" && find ./usr/share/doc -type f ! -name copyright \
            && echo ./usr/share/man && echo ./usr/share/info && echo ./usr/share/locale) \
            >"$CACHE/base-excludes$BASE_FLAVOUR"
        tar -C "$rootfs" --exclude-from="$CACHE/base-excludes$BASE_FLAVOUR" -c . \
            | docker import - "$BASE_IMAGE" >/dev/null
        echo "base image $BASE_IMAGE imported"
    fi
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/wheels" "$context/project" "$context/pip" "$CACHE/wheels"
# The extras the image installs (pyproject.toml [project.optional-dependencies]).
if [ "$AUDIT" = 1 ]; then EXTRAS=${IMAGE_EXTRAS:-audit}; else EXTRAS=${IMAGE_EXTRAS:-broker,controller,operator,fast}; fi
echo "wheels of brokergroup[$EXTRAS] and its dependencies (cache $CACHE/wheels)"
"$PYTHON" -m pip wheel -q --wheel-dir "$CACHE/wheels" ".[$EXTRAS]"
# The dependencies in wheels/ (a cached image layer while they stay the same), the newest
# brokergroup wheel alone in project/ (an older one in the cache must not be picked).
newest=$(ls -t "$CACHE"/wheels/brokergroup-*.whl | head -1)
cp "$newest" "$context/project/"
# Exactly the wheels this project resolves to (the cache may hold older versions too).
"$PYTHON" -m pip download -q --no-index --find-links "$CACHE/wheels" --dest "$context/wheels" \
    "$newest[$EXTRAS]" >/dev/null
rm -f "$context"/wheels/brokergroup-*.whl
# The broker's compiled kernels (broker-image/native) beside it, built here where a Rust
# toolchain is; without one the image's broker runs their Python references.
if [ "$AUDIT" != 1 ]; then
    if env PATH="$HOME/.cargo/bin:$PATH" sh -c 'command -v cargo' >/dev/null 2>&1; then
        PATH="$HOME/.cargo/bin:$PATH" "$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$context/project" ./broker-image/native
    else
        echo "no Rust toolchain (cargo): the image's broker runs the Python kernels"
    fi
fi
# pip itself, run from its wheel inside the build (the image's virtualenv has no pip).
pip_version=$("$PYTHON" -m pip --version | cut -d' ' -f2)
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE/pip" \
    "pip==$pip_version" >/dev/null
cp "$CACHE/pip/pip-$pip_version-py3-none-any.whl" "$context/pip/pip.whl"
cp "$context/pip/pip.whl" "$context/project/pip.whl"
cp "$DOCKERFILE_DIR"/Dockerfile "$context/Dockerfile"
if [ "$AUDIT" = 1 ]; then
    cp broker-image/audit/spark-entrypoint.sh broker-image/audit/audit_job.py "$context/"
fi
echo "docker build $IMAGE (base $BASE_IMAGE)"
docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$IMAGE" "$context" >/dev/null
echo "built $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE") bytes"
