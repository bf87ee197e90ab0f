#!/usr/bin/env bash
# Prints the absolute path of the directory that holds Tekton Pipelines, built
# from the version pinned in hack/tools/tekton/go.mod, on stdout and nothing
# else; progress goes to stderr. The directory holds:
#
#   controller       the TaskRun controller (cmd/controller)
#   entrypoint       the step wrapper every TaskRun pod's init container
#                    copies into /tekton/bin (cmd/entrypoint)
#   nop              the image that stops a step's sidecars (cmd/nop)
#   workingdirinit   the init container that makes step working
#                    directories (cmd/workingdirinit)
#   crds/            the CRDs of tekton.dev, from config/300-crds
#   config/          the controller's ConfigMaps (feature flags, defaults,
#                    logging, leader election...), from config/
#
# The e2e tests of terrarun's Tekton executor (--executor=tekton) run the
# controller as a real controller against the test cluster, and the node
# agent runs the entrypoint, nop and workingdirinit images of its pods from
# these binaries. It needs only Go and the Go module proxy, and builds into
# .cache/tekton only when the pin changes (a stamp records the sha256 of
# go.mod and go.sum).
#
# Usage: hack/tekton.sh [--rebuild]
set -euo pipefail
# shellcheck source=hack/lib/gotool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/gotool.sh"

gotool_args tekton.sh "$@"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
module=github.com/tektoncd/pipeline

# Each program must start and know its flags.
runs_controller() { "$1" --help 2>&1 | grep -q -- -entrypoint-image; }
runs_entrypoint() { "$1" --help 2>&1 | grep -q -- -wait_file; }
runs_nop() { "$1" 2>&1 | grep -q Exiting; }
runs_workingdirinit() { [[ -x $1 ]]; }

dir=
for program in entrypoint nop workingdirinit controller; do
	bin=$(gotool_build tekton.sh tekton "${program}" "${module}" "${module}/cmd/${program}" "runs_${program}" "" "${rebuild}")
	dir=$(dirname "${bin}")
done

# The CRDs and ConfigMaps of the pinned module, copied beside the binaries
# each time (the module is in the module cache once it has built).
src=$(cd "${here}/tools/tekton" && GOWORK=off go list -m -f '{{.Dir}}' "${module}")
rm -rf "${dir}/crds" "${dir}/config"
mkdir -p "${dir}/crds" "${dir}/config"
cp "${src}"/config/300-crds/300-*.yaml "${dir}/crds/"
cp "${src}"/config/config-*.yaml "${dir}/config/"
chmod 0644 "${dir}"/crds/*.yaml "${dir}"/config/*.yaml
echo "${dir}"
