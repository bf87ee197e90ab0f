#!/usr/bin/env bash
# Builds the Kubernetes control plane that the end-to-end tests run terrarun
# against, from the versions pinned in hack/tools/go.mod, and prints the
# absolute path of the directory holding it on stdout, and nothing else;
# progress goes to stderr. The directory, .cache/e2e-tools/bin, holds:
#
#   etcd                     go.etcd.io/etcd/server/v3
#   kube-apiserver           k8s.io/kubernetes/cmd/kube-apiserver
#   kube-controller-manager  k8s.io/kubernetes/cmd/kube-controller-manager
#   kube-scheduler           k8s.io/kubernetes/cmd/kube-scheduler
#   kubectl                  k8s.io/kubernetes/cmd/kubectl
#
# This needs only Go and the Go module proxy: no container runtime and no
# release download. The binaries are built as Kubernetes' release builds are
# (static, -trimpath, the selinux,notest,grpcnotrace tags, version ldflags, so
# that `kubectl version` and the servers report the release), and rebuilt only
# when hack/tools/go.mod, hack/tools/go.sum or the build flags below change: a
# stamp next to bin/ records their sha256. A cold build takes tens of minutes
# on two cores; a fresh cache returns at once.
#
# Usage: hack/e2e-tools.sh [--rebuild]
#   --rebuild  build even when the stamp is fresh.
#
# Example: PATH="$(hack/e2e-tools.sh):$PATH" kubectl version --client
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MODDIR="${ROOT}/hack/tools"
CACHEDIR="${ROOT}/.cache/e2e-tools"
BINDIR="${CACHEDIR}/bin"
STAMP="${CACHEDIR}/bin.stamp"

# The binaries, by the name the build gives them (the last element of the
# package path that is not a major version suffix).
PACKAGES=(
	go.etcd.io/etcd/server/v3
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
)
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

log() { echo "e2e-tools.sh: $*" >&2; }
die() { log "$*"; exit 1; }

rebuild=false
case "${1:-}" in
"") ;;
--rebuild) rebuild=true ;;
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument ${1} (usage: hack/e2e-tools.sh [--rebuild])" ;;
esac
[[ $# -le 1 ]] || die "too many arguments (usage: hack/e2e-tools.sh [--rebuild])"

command -v go >/dev/null 2>&1 || die "go is needed to build the end-to-end tools"

# Everything go runs is against hack/tools/go.mod alone, which is complete:
# -mod=readonly, never -mod=mod (a go.sum that misses an entry is an error to
# fix with go mod tidy in hack/tools, not something to paper over here).
gomod() { (cd "${MODDIR}" && GOWORK=off "$@"); }

# The versions and release date come from the pins, so that the flags, and so
# the stamp, follow them. The build date is the release's tag time, which
# keeps the build reproducible.
pins=$(gomod go list -mod=readonly -m \
	-f '{{.Version}} {{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' \
	k8s.io/kubernetes go.etcd.io/etcd/server/v3)
read -r kube_version kube_date etcd_version _ <<<"${pins//$'\n'/ }"
[[ ${kube_version} =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+ ]] ||
	die "cannot parse the k8s.io/kubernetes version ${kube_version}"
kube_major=${BASH_REMATCH[1]}
kube_minor=${BASH_REMATCH[2]}

# As hack/lib/version.sh (kube::version::ldflags) and hack/lib/golang.sh of
# Kubernetes for a non-debug release build. The module proxy does not say
# which commit a tag is, so gitCommit (and etcd's GitSHA) are left empty
# rather than made up.
ldflags=(-s -w)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=(
		"-X ${pkg}.gitVersion=${kube_version}"
		"-X ${pkg}.gitMajor=${kube_major}"
		"-X ${pkg}.gitMinor=${kube_minor}"
		"-X ${pkg}.gitCommit="
		"-X ${pkg}.gitTreeState=clean"
		"-X ${pkg}.buildDate=${kube_date}"
	)
done
ldflags+=("-X go.etcd.io/etcd/api/v3/version.GitSHA=")
build_flags=(
	-mod=readonly
	-trimpath
	-tags=selinux,notest,grpcnotrace
	"-ldflags=${ldflags[*]}"
)

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum | cut -d' ' -f1
	else
		shasum -a 256 | cut -d' ' -f1
	fi
}
want=$(
	{
		cat "${MODDIR}/go.mod" "${MODDIR}/go.sum"
		printf '%s\n' CGO_ENABLED=0 "${build_flags[@]}" "${PACKAGES[@]}" "${BINARIES[@]}"
	} | sha256
)
fresh() {
	[[ -f ${STAMP} && "$(cat "${STAMP}")" == "${want}" ]] || return 1
	local bin
	for bin in "${BINARIES[@]}"; do
		[[ -x ${BINDIR}/${bin} ]] || return 1
	done
}

if ! ${rebuild} && fresh; then
	echo "${BINDIR}"
	exit 0
fi

mkdir -p "${CACHEDIR}"
# Serialize concurrent builds (parallel test jobs); the loser of the race
# finds the winner's build fresh.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${CACHEDIR}/.lock"
	flock 9
	if ! ${rebuild} && fresh; then
		echo "${BINDIR}"
		exit 0
	fi
fi

log "building Kubernetes ${kube_version} (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) and etcd ${etcd_version} from hack/tools into .cache/e2e-tools/bin (takes tens of minutes on a cold cache)"
tmp="${CACHEDIR}/bin.tmp.$$"
trap 'rm -rf "${tmp}"' EXIT
rm -rf "${tmp}"
mkdir -p "${tmp}"
start=${SECONDS}
# One go build for the five, so that their shared packages are compiled once
# and the links run side by side; nice, as it takes both cores for a while.
gomod env CGO_ENABLED=0 nice -n 10 go build "${build_flags[@]}" -o "${tmp}/" "${PACKAGES[@]}"
# go build names the etcd binary after go.etcd.io/etcd/server/v3's "server".
mv -f "${tmp}/server" "${tmp}/etcd"

# Check that each runs and reports the pinned version before it replaces the
# previous build. (The output is read whole: grep -q on a pipe would stop
# reading at the match and fail the command with SIGPIPE under pipefail.)
reports() {
	local want=$1 out
	shift
	out=$("$@" 2>&1) && grep -qxF -- "${want}" <<<"${out}"
}
reports "Client Version: ${kube_version}" "${tmp}/kubectl" version --client ||
	die "the built kubectl does not report ${kube_version}"
for bin in kube-apiserver kube-controller-manager kube-scheduler; do
	reports "Kubernetes ${kube_version}" "${tmp}/${bin}" --version ||
		die "the built ${bin} does not report ${kube_version}"
done
reports "etcd Version: ${etcd_version#v}" "${tmp}/etcd" --version ||
	die "the built etcd does not report ${etcd_version}"

rm -f "${STAMP}"
mkdir -p "${BINDIR}"
for bin in "${BINARIES[@]}"; do
	mv -f "${tmp}/${bin}" "${BINDIR}/${bin}"
done
echo "${want}" >"${STAMP}.tmp.$$"
mv -f "${STAMP}.tmp.$$" "${STAMP}"
log "built in $((SECONDS - start))s: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl ${kube_version}, etcd ${etcd_version}"
echo "${BINDIR}"
