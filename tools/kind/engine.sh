#!/usr/bin/env bash
# The container engine of the kind e2e tier.
#
#   tools/kind/engine.sh start   # print `export DOCKER_HOST=...` for the engine the tier uses
#   tools/kind/engine.sh stop    # stop the dockerd this script started (by PID) and undo its host changes
#   tools/kind/engine.sh status
#
# A docker that already answers (DOCKER_HOST or the default socket) is used as it is and never
# stopped here. Otherwise, as root, Debian's engine is installed if missing (apt: docker.io
# containerd runc iptables ...) and dockerd is started by hand (no systemd needed) on its own
# socket, data root and exec root under $KIND_CACHE/docker, with tools/kind/runc-nosysres as the
# default OCI runtime (it drops capabilities the host's bounding set lacks, or a privileged kind
# node cannot start where CAP_SYS_RESOURCE is missing). Exit 2 with the reason when no engine
# can run here.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
S=$KIND_CACHE/docker
SOCK=unix://$S/docker.sock

own_running() { [ -f "$S/dockerd.pid" ] && kill -0 "$(cat "$S/dockerd.pid")" 2>/dev/null; }

install_engine() {
  [ "$(id -u)" = 0 ] || die 2 "no container engine answers and installing one needs root"
  command -v apt-get >/dev/null || die 2 "no container engine answers and apt-get is missing (not Debian)"
  log "installing Debian's container engine (apt-get: docker.io containerd runc iptables ...)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    docker.io containerd runc iptables debootstrap libseccomp-dev pkg-config jq libcap2-bin >&2 \
    || die 2 "apt-get could not install the container engine"
}

start() {
  if [ -z "${BROKERGROUP_KIND_OWN_ENGINE:-}" ] && ! own_running && docker info >/dev/null 2>&1; then
    log "using the container engine that already answers (${DOCKER_HOST:-default socket})"
    echo "export DOCKER_HOST=${DOCKER_HOST:-}"
    return
  fi
  if own_running && DOCKER_HOST=$SOCK docker info >/dev/null 2>&1; then
    log "dockerd already running (pid $(cat "$S/dockerd.pid"), $SOCK)"
    echo "export DOCKER_HOST=$SOCK"
    return
  fi
  command -v dockerd >/dev/null && command -v docker >/dev/null && command -v jq >/dev/null \
    && command -v capsh >/dev/null && command -v debootstrap >/dev/null || install_engine
  [ "$(id -u)" = 0 ] || die 2 "starting dockerd by hand needs root"
  mkdir -p "$S/data" "$S/exec"
  # dockerd sets the FORWARD policy to DROP when it has to turn forwarding on itself, which
  # would cut bridged traffic of anything else on this host; turn it on first (restored on stop).
  cat /proc/sys/net/ipv4/ip_forward >"$S/ip_forward.orig"
  sysctl -qw net.ipv4.ip_forward=1
  [ -d /lib/modules ] || { mkdir /lib/modules && touch "$S/made-lib-modules"; }
  log "starting dockerd on $SOCK (data root $S/data)"
  # The daemon outlives this script: it must not inherit our descriptors beyond 0-2 (a
  # caller's `flock LOCKFILE make e2e` would otherwise stay locked for dockerd's lifetime).
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    exec setsid dockerd -H "$SOCK" --data-root "$S/data" --exec-root "$S/exec" \
      --pidfile "$S/dockerd.pid" \
      --add-runtime nosysres="$KIND_HERE/runc-nosysres" --default-runtime nosysres \
      >"$S/dockerd.log" 2>&1 </dev/null
  ) &
  local i
  for i in $(seq 60); do
    DOCKER_HOST=$SOCK docker info >/dev/null 2>&1 && break
    sleep 1
  done
  DOCKER_HOST=$SOCK docker info >/dev/null 2>&1 \
    || die 2 "dockerd did not answer within 60 s: $(tail -3 "$S/dockerd.log" | tr '\n' ' ')"
  # A privileged container is what a kind node is: prove it runs before building anything.
  log "dockerd pid $(cat "$S/dockerd.pid"), $(DOCKER_HOST=$SOCK docker version -f 'engine {{.Server.Version}}')"
  echo "export DOCKER_HOST=$SOCK"
}

stop() {
  if ! [ -f "$S/dockerd.pid" ]; then log "no dockerd started by this script"; return; fi
  local pid; pid=$(cat "$S/dockerd.pid")
  if kill -0 "$pid" 2>/dev/null; then
    DOCKER_HOST=$SOCK docker network rm kind >/dev/null 2>&1 || true
    log "stopping dockerd pid $pid"
    kill -TERM "$pid"
    local i
    for i in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { log "dockerd $pid ignored TERM for 30 s; KILL"; kill -KILL "$pid"; }
  fi
  rm -f "$S/dockerd.pid"
  # Docker leaves its bridge and iptables chains behind. Remove them unless another dockerd
  # (not ours) still runs and owns them.
  if pgrep -x dockerd >/dev/null; then
    log "another dockerd runs on this host: its bridge and iptables rules are left alone"
  else
    ip link del docker0 2>/dev/null || true
    local r c
    for r in "-j DOCKER-USER" "-j DOCKER-ISOLATION-STAGE-1" \
      "-o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT" "-o docker0 -j DOCKER" \
      "-i docker0 ! -o docker0 -j ACCEPT" "-i docker0 -o docker0 -j ACCEPT"; do
      # shellcheck disable=SC2086
      while iptables -D FORWARD $r 2>/dev/null; do :; done
    done
    for c in DOCKER DOCKER-ISOLATION-STAGE-1 DOCKER-ISOLATION-STAGE-2 DOCKER-USER; do
      iptables -F "$c" 2>/dev/null || true
      iptables -X "$c" 2>/dev/null || true
    done
    iptables -t nat -D PREROUTING -m addrtype --dst-type LOCAL -j DOCKER 2>/dev/null || true
    iptables -t nat -D OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER 2>/dev/null || true
    iptables -t nat -D POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE 2>/dev/null || true
    iptables -t nat -F DOCKER 2>/dev/null || true
    iptables -t nat -X DOCKER 2>/dev/null || true
  fi
  if [ -f "$S/ip_forward.orig" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$S/ip_forward.orig")"
    rm -f "$S/ip_forward.orig"
  fi
  if [ -f "$S/made-lib-modules" ]; then rmdir /lib/modules 2>/dev/null || true; rm -f "$S/made-lib-modules"; fi
  log "dockerd stopped; its data root stays in $S/data (images are reused next time)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if own_running; then echo "dockerd pid $(cat "$S/dockerd.pid") on $SOCK"; else echo "not running"; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 64 ;;
esac
