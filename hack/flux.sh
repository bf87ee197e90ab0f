#!/usr/bin/env bash
# Prints the absolute path of a Flux source-controller binary built from the
# version pinned in hack/tools/flux/go.mod, on stdout and nothing else;
# progress goes to stderr. Its CRDs (GitRepository, OCIRepository, Bucket
# and the rest of source.toolkit.fluxcd.io), copied from the same module,
# are in the crds directory beside it. The e2e tests of
# spec.source.sourceRef run it as a real controller against the test
# cluster. It needs only Go and the Go module proxy, and builds into
# .cache/flux only when the pin changes (a stamp records the sha256 of
# go.mod and go.sum).
#
# Usage: hack/flux.sh [--rebuild]
#
# Example: kubectl apply -f "$(dirname "$(hack/flux.sh)")/crds"
set -euo pipefail
# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/gotool.sh"

gotool_args flux.sh "$@"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

# runs checks the binary and, as it is fresh, copies the CRDs of the pinned
# module beside it (the module is in the module cache once it has built).
runs() {
	"$1" --help 2>&1 | grep -q -- --storage-adv-addr || return 1
	local dir crds
	dir=$(cd "${here}/tools/flux" && GOWORK=off go list -m -f '{{.Dir}}' github.com/fluxcd/source-controller)
	crds="$(dirname "$1")/crds"
	rm -rf "${crds}"
	mkdir -p "${crds}"
	cp "${dir}"/config/crd/bases/source.toolkit.fluxcd.io_*.yaml "${crds}/"
	chmod 0644 "${crds}"/*.yaml
}
gotool_build flux.sh flux source-controller github.com/fluxcd/source-controller github.com/fluxcd/source-controller runs "" "${rebuild}"
