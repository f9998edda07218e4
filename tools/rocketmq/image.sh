#!/usr/bin/env bash
# `make image-rocketmq`: the image of stock RocketMQ brokers that `spec.engine: rocketmq`
# runs (broker-image/rocketmq.Dockerfile). Stock 5.3 broker jars from Maven Central (the ones
# `tools/rocketmq/fetch.sh server` caches) on Debian bookworm with Debian's headless JRE 17,
# built with debootstrap like the broker image's offline base (OFFLINE_BASE=1 in
# tools/image/build.sh): no registry is needed, only a Debian mirror for the first build.
# The jars and the base are cached outside the repository; a warm build takes seconds.
#
#   tools/rocketmq/image.sh                        # tag brokergroup-rocketmq:5.3.3
#   IMAGE=my/rocketmq:5.3.3 tools/rocketmq/image.sh
#
# The image has no RocketMQ shell scripts and no Python: its entrypoint is `java` with the
# broker's main class (the operator gives the whole java command line, see
# docs/rocketmq-compatibility.md "Engine rocketmq in Kubernetes").
# Exits 2 with the reason when no container engine answers (`docker info`).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${BROKERGROUP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup}/image
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=brokergroup-base:bookworm-jre17-headless
rootfs="$CACHE/rootfs-bookworm-jre17-headless"

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
    echo "make image-rocketmq: no container engine answers (docker info failed); nothing built" >&2
    exit 2
fi

# The stock jars (a no-op when cached); fetch.sh's last line is the cache directory.
home=$(flock /tmp/bg-rmq-fetch.lock tools/rocketmq/fetch.sh server | tail -1)
version=$(cat "$home/server/VERSION")
IMAGE=${IMAGE:-brokergroup-rocketmq:$version}

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    if [ ! -x "$rootfs/usr/lib/jvm/java-17-openjdk-amd64/bin/java" ]; then
        command -v debootstrap >/dev/null || { echo "image-rocketmq needs debootstrap" >&2; exit 2; }
        rm -rf "$rootfs.tmp" && mkdir -p "$rootfs.tmp"
        echo "debootstrap bookworm (openjdk-17-jre-headless) into $rootfs"
        debootstrap --variant=minbase --include=openjdk-17-jre-headless,ca-certificates,passwd \
            bookworm "$rootfs.tmp" "$MIRROR" >"$CACHE/debootstrap-jre17.log" 2>&1
        rm -rf "$rootfs.tmp"/var/cache/apt/archives/*.deb "$rootfs.tmp"/var/lib/apt/lists/*
        rm -rf "$rootfs" && mv "$rootfs.tmp" "$rootfs"
    fi
    # Slim, as the broker image's base: no manuals, translations or docs but the copyright files.
    (cd "$rootfs" && find ./usr/share/doc -type f ! -name copyright \
        && echo ./usr/share/man && echo ./usr/share/info && echo ./usr/share/locale) \
        >"$CACHE/base-jre17-excludes"
    tar -C "$rootfs" --exclude-from="$CACHE/base-jre17-excludes" -c . \
        | docker import - "$BASE_IMAGE" >/dev/null
    echo "base image $BASE_IMAGE imported"
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/lib"
# Every jar fetch.sh resolved for the servers (broker, its dependencies, namesrv, tools and the
# gRPC proxy, which a rocketmq-engine group runs from this image too: rocketmq_proxy.py).
cp "$home"/server/lib/*.jar "$context/lib/"
cp broker-image/rocketmq.Dockerfile "$context/Dockerfile"
echo "docker build $IMAGE (RocketMQ $version, base $BASE_IMAGE)"
docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg ROCKETMQ_VERSION="$version" \
    -t "$IMAGE" "$context" >/dev/null
echo "built $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE") bytes"
