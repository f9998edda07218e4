#!/usr/bin/env bash
# An S3-compatible server for the audit's object-store tests (issue 21): versitygw, an
# Apache-2.0 S3 gateway whose `posix` backend serves a directory, built from the Go module
# proxy with `go install` into a cache outside the repository. Binaries already there are
# kept. Prints the binary's path on its last line.
#
#   tools/s3/build.sh            # -> ~/.cache/brokergroup/s3/versitygw-v1.8.0/bin/versitygw
#   BROKERGROUP_S3_BIN=/path     # a versitygw binary built elsewhere (the tests look there first)
set -euo pipefail

VERSION=v1.8.0
MODULE=github.com/versity/versitygw
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/brokergroup/s3/versitygw-$VERSION"
BIN="$CACHE/bin/versitygw"

if [[ -x "$BIN" ]]; then
    echo "$BIN"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "tools/s3/build.sh: Go is not installed; the object-store tests will skip" >&2
    exit 2
fi
mkdir -p "$CACHE/bin"
# -trimpath: the binary does not depend on where the module cache is.
GOBIN="$CACHE/bin.tmp" GOFLAGS=-trimpath go install "$MODULE/cmd/versitygw@$VERSION"
mv "$CACHE/bin.tmp/versitygw" "$BIN"
rmdir "$CACHE/bin.tmp"
echo "$BIN"
