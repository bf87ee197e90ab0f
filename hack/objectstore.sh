#!/usr/bin/env bash
# Prints the absolute path of a versitygw binary (an S3-compatible server)
# built from the version pinned in hack/tools/objectstore/go.mod, on stdout
# and nothing else; progress goes to stderr. The tests of terrarun's object
# store start it as a real server process
# (pkg/artifacts/objectstore/objectstoretest). It needs only Go and the Go
# module proxy, and builds into .cache/objectstore/versitygw only when the
# pin changes (a stamp records the sha256 of go.mod and go.sum).
#
# Usage: hack/objectstore.sh [--rebuild]
#
# Example: "$(hack/objectstore.sh)" --access test --secret testsecret --port :7070 posix /tmp/bucket-root
set -euo pipefail
# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/gotool.sh"

gotool_args objectstore.sh "$@"

runs() { "$1" --help >/dev/null 2>&1; }
gotool_build objectstore.sh objectstore versitygw github.com/versity/versitygw github.com/versity/versitygw/cmd/versitygw runs "" "${rebuild}"
