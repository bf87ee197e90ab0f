#!/usr/bin/env bash
# Prints the absolute path of a registry binary (CNCF Distribution, an OCI
# registry) built from the version pinned in hack/tools/registry/go.mod, on
# stdout and nothing else; progress goes to stderr. The tests of terrarun's
# OCI sources start it as a real server process
# (pkg/source/oci/ocitest), and the README's OCI example starts it by hand.
# It needs only Go and the Go module proxy, and builds into
# .cache/registry/registry only when the pin changes (a stamp records the
# sha256 of go.mod and go.sum).
#
# Usage: hack/registry.sh [--rebuild]
#
# Example: REGISTRY_HTTP_ADDR=127.0.0.1:5000 REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/tmp/registry "$(hack/registry.sh)" serve hack/registry.yaml
set -euo pipefail
# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/gotool.sh"

gotool_args registry.sh "$@"

runs() { "$1" --version 2>&1 | grep -q -- "$2"; }
gotool_build registry.sh registry registry github.com/distribution/distribution/v3 github.com/distribution/distribution/v3/cmd/registry runs \
	"-X github.com/distribution/distribution/v3/version.version={version}" "${rebuild}"
