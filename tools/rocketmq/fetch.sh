#!/usr/bin/env bash
# Fetch a stock RocketMQ client (rocketmq-client, rocketmq-tools, rocketmq-acl and their
# dependencies) from Maven Central with the machine's Maven, and compile the golden-frame
# program (tools/rocketmq/GoldenClient.java) against it.
#
# `fetch.sh server` also fetches the stock servers (rocketmq-broker, rocketmq-namesrv,
# rocketmq-controller, rocketmq-proxy, rocketmq-tools) into server/lib/, for the tiers and
# benchmarks that run real RocketMQ brokers (launch: java -cp "<home>/server/lib/*" org.apache.rocketmq.broker.BrokerStartup).
# The servers are 5.3.3 (ROCKETMQ_SERVER_VERSION; server/VERSION says which): Maven Central has no
# rocketmq-namesrv jar for 5.3.0-5.3.2. A 5.3.1 client speaks the same protocol to them.
#
# Output: $BROKERGROUP_ROCKETMQ_HOME, default ${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq/<version>,
# with lib/ (the jars) and classes/ (the compiled program). Never inside the repository.
# Idempotent: jars already there are kept, the program is recompiled only when its source
# changed (a warm run takes seconds). Prints the directory on its last line.
#
# Version: 5.3.1 is the newest 5.3.x with all three jars on Maven Central (5.3.2 has no
# rocketmq-tools jar; 5.3.3 folded rocketmq-acl into rocketmq-client); one version for all.
set -euo pipefail
VERSION=${ROCKETMQ_VERSION:-5.3.1}
SERVER_VERSION=${ROCKETMQ_SERVER_VERSION:-5.3.3}
here=$(cd "$(dirname "$0")" && pwd)
home=${BROKERGROUP_ROCKETMQ_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq/$VERSION}
for tool in mvn javac java; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tools/rocketmq/fetch.sh: $tool is not installed; the RocketMQ client tier cannot run" >&2
    exit 3
  fi
done
mkdir -p "$home/lib" "$home/classes"
if [ ! -f "$home/lib/.complete" ]; then
  echo "fetching rocketmq-client/tools/acl $VERSION and dependencies into $home/lib" >&2
  sed "s/@VERSION@/$VERSION/g" "$here/pom.xml.in" >"$home/pom.xml"
  mvn -q -B -f "$home/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/lib" -DincludeScope=runtime >&2
  touch "$home/lib/.complete"
fi
if [ "${1:-}" = server ] && [ "$(cat "$home/server/lib/.complete" 2>/dev/null)" != "$SERVER_VERSION" ]; then
  rm -rf "$home/server"
  mkdir -p "$home/server/lib"
  echo "fetching rocketmq-broker/namesrv/controller/tools $SERVER_VERSION and dependencies into $home/server/lib" >&2
  sed "s/@VERSION@/$SERVER_VERSION/g" "$here/pom-server.xml.in" >"$home/server/pom.xml"
  mvn -q -B -f "$home/server/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/server/lib" -DincludeScope=runtime >&2
  echo "$SERVER_VERSION" >"$home/server/VERSION"
  echo "$SERVER_VERSION" >"$home/server/lib/.complete"
elif [ "${1:-}" = server ] && ! compgen -G "$home/server/lib/rocketmq-proxy-*.jar" >/dev/null; then
  # A cache from before the proxy joined the pom: add its jars beside the others (copying
  # only adds files, so JVMs running from this directory keep theirs).
  echo "fetching rocketmq-proxy $SERVER_VERSION and dependencies into $home/server/lib" >&2
  sed "s/@VERSION@/$SERVER_VERSION/g" "$here/pom-server.xml.in" >"$home/server/pom.xml"
  mvn -q -B -f "$home/server/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/server/lib" -DincludeScope=runtime >&2
fi
src="$here/GoldenClient.java"
stamp="$home/classes/.source-$(sha256sum "$src" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -f "$home/classes"/.source-* "$home/classes"/*.class
  javac -nowarn -d "$home/classes" -cp "$home/lib/*" "$src" >&2
  touch "$stamp"
fi
# The stock producer/consumer of the failover tests and bench/rocketmq_controller.py, in a
# directory of its own (recompiling one program never deletes the other's classes).
src="$here/FailoverClient.java"
mkdir -p "$home/failover-classes"
stamp="$home/failover-classes/.source-$(sha256sum "$src" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -f "$home/failover-classes"/.source-* "$home/failover-classes"/*.class
  javac -nowarn -d "$home/failover-classes" -cp "$home/lib/*" "$src" >&2
  touch "$stamp"
fi
echo "$home"
