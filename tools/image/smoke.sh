#!/usr/bin/env bash
# `make image-smoke`: the built image runs a whole group. One container with a
# read-only root filesystem, a tmpfs /tmp and a volume /data runs
# `brokergroup local up` (3 controllers + 3 brokers, non-root); the test
# produces 200 keyed messages through the controllers' discovery, consumes
# them back and compares every key, then stops the container (SIGTERM: the
# runtime's clean shutdown) and removes it and its volume.
set -euo pipefail
IMAGE=${IMAGE:-brokergroup:dev}
NAME=bg-image-smoke-$$
VOLUME=$NAME
CONTROLLERS=127.0.1.1:9878,127.0.1.2:9878,127.0.1.3:9878
cleanup() {
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    docker volume rm "$VOLUME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
docker volume create "$VOLUME" >/dev/null
docker run -d --name "$NAME" --read-only --tmpfs /tmp -v "$VOLUME:/data" "$IMAGE" \
    local up --dir /data/local >/dev/null
for _ in $(seq 60); do
    if docker exec "$NAME" brokergroup local status --dir /data/local 2>/dev/null \
        | grep -q '^master: broker'; then
        break
    fi
    sleep 1
done
docker exec "$NAME" brokergroup local status --dir /data/local
docker exec "$NAME" brokergroup produce --topic smoke --count 200 --key-prefix smoke- \
    --controller-addresses "$CONTROLLERS" --json | tail -1
got=$(docker exec "$NAME" brokergroup consume --topic smoke --from-beginning --idle-timeout-ms 2000 \
    --json --controller-addresses "$CONTROLLERS" \
    | python3 -c 'import json, sys; print("\n".join(sorted(json.loads(l)["key"] for l in sys.stdin)))')
want=$(python3 -c 'print("\n".join(sorted(f"smoke-{i}" for i in range(200))))')
if [ "$got" != "$want" ]; then
    echo "image smoke: consumed keys differ from the produced ones" >&2
    diff <(echo "$want") <(echo "$got") | head -20 >&2
    exit 1
fi
docker exec "$NAME" id -u | grep -qx 10001
docker stop -t 30 "$NAME" >/dev/null
docker logs "$NAME" 2>&1 | tail -1
echo "image smoke: $IMAGE ran a group read-only as uid 10001; 200 of 200 keys read back"
