#!/usr/bin/env bash
# Prints the absolute path of a versitygw binary (an S3-compatible server)
# built from the version pinned in hack/tools/objectstore/go.mod, on stdout
# and nothing else; progress goes to stderr. The tests of terrarun's object
# store start it as a real server process (test/internal/objectstore). It
# needs only Go and the Go module proxy, and builds into
# .cache/objectstore/versitygw only when the pin changes (a stamp records the
# sha256 of go.mod and go.sum).
#
# Usage: hack/objectstore.sh [--rebuild]
#
# Example: "$(hack/objectstore.sh)" --access test --secret testsecret --port :7070 posix /tmp/bucket-root
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MODDIR="${ROOT}/hack/tools/objectstore"
CACHEDIR="${ROOT}/.cache/objectstore"
BIN="${CACHEDIR}/versitygw"
STAMP="${CACHEDIR}/versitygw.stamp"

log() { echo "objectstore.sh: $*" >&2; }
die() { log "$*"; exit 1; }

rebuild=false
case "${1:-}" in
"") ;;
--rebuild) rebuild=true ;;
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument ${1} (usage: hack/objectstore.sh [--rebuild])" ;;
esac

want=$(cat "${MODDIR}/go.mod" "${MODDIR}/go.sum" | sha256sum | cut -d' ' -f1)
fresh() { [[ -x ${BIN} && -f ${STAMP} && "$(cat "${STAMP}")" == "${want}" ]]; }
if ! ${rebuild} && fresh; then
	echo "${BIN}"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "go is needed to build versitygw"
mkdir -p "${CACHEDIR}"
# Serialize concurrent builds; the loser of the race finds the build fresh.
exec 9>"${CACHEDIR}/.lock"
flock 9
if ! ${rebuild} && fresh; then
	echo "${BIN}"
	exit 0
fi

version=$(cd "${MODDIR}" && GOWORK=off go list -m -f '{{.Version}}' github.com/versity/versitygw)
log "building versitygw ${version} from hack/tools/objectstore into .cache/objectstore (takes minutes on a cold cache)"
tmp="${BIN}.tmp.$$"
trap 'rm -f "${tmp}"' EXIT
start=${SECONDS}
(
	cd "${MODDIR}"
	GOWORK=off CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "-s -w" \
		-o "${tmp}" github.com/versity/versitygw/cmd/versitygw
)
"${tmp}" --help >/dev/null 2>&1 || die "the built versitygw does not run"
mv -f "${tmp}" "${BIN}"
echo "${want}" >"${STAMP}.tmp.$$"
mv -f "${STAMP}.tmp.$$" "${STAMP}"
log "built versitygw ${version} in $((SECONDS - start))s"
echo "${BIN}"
