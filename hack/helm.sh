#!/usr/bin/env bash
# Prints the absolute path of a Helm binary built from the version pinned in
# hack/tools/helm/go.mod, on stdout and nothing else; progress goes to stderr.
# make test uses it to lint, render and install charts/terrarun. It needs only
# Go and the Go module proxy, and builds into .cache/helm/helm only when the
# pin changes (a stamp records the sha256 of go.mod and go.sum).
#
# Usage: hack/helm.sh [--rebuild]
#
# Example: "$(hack/helm.sh)" lint charts/terrarun
set -euo pipefail
# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/gotool.sh"

gotool_args helm.sh "$@"

# As Helm's release builds (its Makefile): static, -trimpath, the version in
# ldflags so that `helm version` reports the release.
reports() { "$1" version --short 2>/dev/null | grep -qF "$2"; }
gotool_build helm.sh helm helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm reports \
	"-X helm.sh/helm/v4/internal/version.version={version} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" "${rebuild}"
