#!/usr/bin/env bash
# Fetch the RocketMQ 5.x Java SDK (org.apache.rocketmq:rocketmq-client-java, gRPC) and its
# dependencies from Maven Central with the machine's Maven, and compile
# tools/rocketmq/GrpcSdkClient.java against it (tests/integration/test_grpc_sdk.py).
#
# Output: $BROKERGROUP_ROCKETMQ_SDK_HOME, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq-client-java/<version>, with lib/ and
# classes/; never inside the repository. Idempotent (a warm run takes seconds). Prints the
# directory on its last line.
set -euo pipefail
VERSION=${ROCKETMQ_SDK_VERSION:-5.0.7}
here=$(cd "$(dirname "$0")" && pwd)
home=${BROKERGROUP_ROCKETMQ_SDK_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/rocketmq-client-java/$VERSION}
for tool in mvn javac java; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tools/rocketmq/fetch_sdk.sh: $tool is not installed" >&2
    exit 3
  fi
done
mkdir -p "$home/lib" "$home/classes"
if [ ! -f "$home/lib/.complete" ]; then
  echo "fetching rocketmq-client-java $VERSION and dependencies into $home/lib" >&2
  sed "s/@VERSION@/$VERSION/g" "$here/pom-sdk.xml.in" >"$home/pom.xml"
  mvn -q -B -f "$home/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$home/lib" -DincludeScope=runtime >&2
  touch "$home/lib/.complete"
fi
src="$here/GrpcSdkClient.java"
stamp="$home/classes/.source-$(sha256sum "$src" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -f "$home/classes"/.source-* "$home/classes"/*.class
  javac -nowarn -d "$home/classes" -cp "$home/lib/*" "$src" >&2
  touch "$stamp"
fi
echo "$home"
