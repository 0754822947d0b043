#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (the S3-compatible object store the tiered-storage tests and
# the benchmark start) from the Go module proxy into .tools/bin/weed, once. Its go.mod has
# replace directives, so `go install module@version` refuses it: the module is
# downloaded with `go mod download` and built inside it. The first build on a machine
# takes long (SeaweedFS is a large program: about 25 minutes on 2 busy cores); the binary
# is also kept in ~/.cache/headrace, so another clone on the same machine (CI's) copies it
# in a second. A second run does nothing.
set -euo pipefail

WEED_MODULE=github.com/seaweedfs/seaweedfs
# A pseudo-version: SeaweedFS's tags are not semantic versions the proxy lists.
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.tools/bin/weed"
stamp="$root/.tools/bin/.weed-$WEED_VERSION"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/headrace/weed-$WEED_VERSION"

if [ -x "$out" ] && [ -e "$stamp" ]; then
    touch "$out"  # newer than this script: make skips it next time
    exit 0
fi
if [ -x "$cache" ]; then
    mkdir -p "$root/.tools/bin"
    cp "$cache" "$out.tmp" && mv "$out.tmp" "$out"
    rm -f "$root"/.tools/bin/.weed-*
    touch "$stamp"
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "warning: Go is not installed: the tiered-storage tests on S3 will be skipped" >&2
    exit 0
fi
echo "building SeaweedFS's weed $WEED_VERSION (a few minutes, once) ..."
dir=$(go mod download -json "$WEED_MODULE@$WEED_VERSION" | sed -nE 's/^\s*"Dir": "(.*)",?$/\1/p')
mkdir -p "$root/.tools/bin"
(cd "$dir" && GOFLAGS=-buildvcs=false go build -ldflags="-s -w" -o "$out.tmp" ./weed)
mv "$out.tmp" "$out"
mkdir -p "$(dirname "$cache")" && cp "$out" "$cache.tmp" && mv "$cache.tmp" "$cache"
rm -f "$root"/.tools/bin/.weed-*
touch "$stamp"
