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

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MODDIR="${ROOT}/hack/tools/helm"
CACHEDIR="${ROOT}/.cache/helm"
HELM="${CACHEDIR}/helm"
STAMP="${CACHEDIR}/helm.stamp"

log() { echo "helm.sh: $*" >&2; }
die() { log "$*"; exit 1; }

rebuild=false
case "${1:-}" in
"") ;;
--rebuild) rebuild=true ;;
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument ${1} (usage: hack/helm.sh [--rebuild])" ;;
esac

want=$(cat "${MODDIR}/go.mod" "${MODDIR}/go.sum" | sha256sum | cut -d' ' -f1)
fresh() { [[ -x ${HELM} && -f ${STAMP} && "$(cat "${STAMP}")" == "${want}" ]]; }
if ! ${rebuild} && fresh; then
	echo "${HELM}"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "go is needed to build helm"
mkdir -p "${CACHEDIR}"
# Serialize concurrent builds; the loser of the race finds the build fresh.
exec 9>"${CACHEDIR}/.lock"
flock 9
if ! ${rebuild} && fresh; then
	echo "${HELM}"
	exit 0
fi

version=$(cd "${MODDIR}" && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v4)
log "building Helm ${version} from hack/tools/helm into .cache/helm (takes minutes on a cold cache)"
tmp="${HELM}.tmp.$$"
trap 'rm -f "${tmp}"' EXIT
start=${SECONDS}
# As Helm's release builds (its Makefile): static, -trimpath, the version in
# ldflags so that `helm version` reports the release.
(
	cd "${MODDIR}"
	GOWORK=off CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${version} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
		-o "${tmp}" helm.sh/helm/v4/cmd/helm
)
"${tmp}" version --short 2>/dev/null | grep -qF "${version}" || die "the built helm does not report ${version}"
mv -f "${tmp}" "${HELM}"
echo "${want}" >"${STAMP}.tmp.$$"
mv -f "${STAMP}.tmp.$$" "${STAMP}"
log "built Helm ${version} in $((SECONDS - start))s"
echo "${HELM}"
