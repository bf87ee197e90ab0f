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
#   images/          entrypoint, nop and workingdirinit as OCI image layouts
#                    (and tarballs), built by hack/images as terrarun's own
#                    images are: each binary at /ko-app/<name>, as ko lays
#                    out Tekton's released images
#   crds/            the CRDs of tekton.dev, from config/300-crds
#   config/          the controller's ConfigMaps (feature flags, defaults,
#                    logging, leader election...), from config/
#
# The e2e tests of terrarun's Tekton executor (--executor=tekton) run the
# controller as a real controller against the test cluster, and the node
# agent runs the entrypoint, nop and workingdirinit images of its pods from
# images/. It needs only Go and the Go module proxy, and builds into
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

# The images of the pods' programs, made again when a program is newer.
version=$(cd "${here}/tools/tekton" && GOWORK=off go list -m -f '{{.Version}}' "${module}")
stale=
for program in entrypoint nop workingdirinit; do
	[[ ${dir}/images/${program}/index.json -nt ${dir}/${program} ]] || stale=1
done
if [[ -n ${stale} ]]; then
	echo "tekton.sh: building the images of entrypoint, nop and workingdirinit" >&2
	(cd "${here}/.." && GOWORK=off go run ./hack/images -out "${dir}/images" -registry ghcr.io/tektoncd/pipeline -version "${version}" -epoch 0 \
		-static "entrypoint=${dir}/entrypoint" -static "nop=${dir}/nop" -static "workingdirinit=${dir}/workingdirinit") >&2
fi

# The CRDs and ConfigMaps of the pinned module, copied beside the binaries
# each time (the module is in the module cache once it has built).
src=$(cd "${here}/tools/tekton" && GOWORK=off go list -m -f '{{.Dir}}' "${module}")
rm -rf "${dir}/crds" "${dir}/config"
mkdir -p "${dir}/crds" "${dir}/config"
cp "${src}"/config/300-crds/300-*.yaml "${dir}/crds/"
cp "${src}"/config/config-*.yaml "${dir}/config/"
chmod 0644 "${dir}"/crds/*.yaml "${dir}"/config/*.yaml
echo "${dir}"
