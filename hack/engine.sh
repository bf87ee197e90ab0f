#!/usr/bin/env bash
# Prints the absolute path of a Terraform-compatible engine (terraform or tofu)
# on stdout, and nothing else; progress goes to stderr. In order:
#
#   1. $TERRARUN_ENGINE, when set (a path, or a command name on PATH);
#   2. tofu, then terraform, on PATH;
#   3. .cache/engine/tofu, built earlier from hack/tools/opentofu, when its stamp
#      matches the sha256 of hack/tools/opentofu/go.mod;
#   4. otherwise OpenTofu is built from hack/tools/opentofu into
#      .cache/engine/tofu. This needs only Go and the Go module proxy: no
#      Terraform registry or release download.
#
# Usage: hack/engine.sh [--build | --rebuild]
#   --build    skip 1 and 2: use the cached OpenTofu build, building it if needed
#              (verifies the build path even where terraform is installed).
#   --rebuild  like --build, but always builds, ignoring the stamp.
#
# Example: make test TERRARUN_ENGINE="$(hack/engine.sh)"
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
MODDIR="${ROOT}/hack/tools/opentofu"
CACHEDIR="${ROOT}/.cache/engine"
ENGINE="${CACHEDIR}/tofu"
STAMP="${CACHEDIR}/tofu.stamp"

log() { echo "engine.sh: $*" >&2; }
die() { log "$*"; exit 1; }

mode=find
case "${1:-}" in
"") ;;
--build) mode=build ;;
--rebuild) mode=rebuild ;;
-h | --help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown argument ${1} (usage: hack/engine.sh [--build | --rebuild])" ;;
esac
[[ $# -le 1 ]] || die "too many arguments (usage: hack/engine.sh [--build | --rebuild])"

# abspath makes a path absolute without resolving symlinks (a symlinked tofu
# or terraform keeps its name).
abspath() {
	case "$1" in
	/*) echo "$1" ;;
	*) echo "${PWD}/$1" ;;
	esac
}

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	else
		shasum -a 256 "$1" | cut -d' ' -f1
	fi
}

if [[ ${mode} == find ]]; then
	if [[ -n ${TERRARUN_ENGINE:-} ]]; then
		path=$(command -v -- "${TERRARUN_ENGINE}" 2>/dev/null) ||
			die "TERRARUN_ENGINE=${TERRARUN_ENGINE} is not an executable"
		[[ -f ${path} && -x ${path} ]] || die "TERRARUN_ENGINE=${TERRARUN_ENGINE} is not an executable file"
		abspath "${path}"
		exit 0
	fi
	for name in tofu terraform; do
		if path=$(command -v -- "${name}" 2>/dev/null) && [[ -f ${path} && -x ${path} ]]; then
			abspath "${path}"
			exit 0
		fi
	done
fi

want=$(sha256 "${MODDIR}/go.mod")
fresh() { [[ -x ${ENGINE} && -f ${STAMP} && "$(cat "${STAMP}")" == "${want}" ]]; }

if [[ ${mode} != rebuild ]] && fresh; then
	echo "${ENGINE}"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "no tofu or terraform on PATH, and no go to build OpenTofu with"
mkdir -p "${CACHEDIR}"

# Serialize concurrent builds (parallel test jobs); the loser of the race
# finds the winner's build fresh.
if command -v flock >/dev/null 2>&1; then
	exec 9>"${CACHEDIR}/.lock"
	flock 9
	if [[ ${mode} != rebuild ]] && fresh; then
		echo "${ENGINE}"
		exit 0
	fi
fi

version=$(cd "${MODDIR}" && GOWORK=off go list -m -f '{{.Version}}' github.com/opentofu/opentofu)
log "building OpenTofu ${version} from hack/tools/opentofu into .cache/engine/tofu (takes minutes on a cold cache)"
tmp="${ENGINE}.tmp.$$"
trap 'rm -f "${tmp}"' EXIT
start=${SECONDS}
# As OpenTofu's release builds (.goreleaser.yaml): static, -trimpath, and
# version.dev=no so `tofu version` prints the release version without "-dev".
(
	cd "${MODDIR}"
	GOWORK=off CGO_ENABLED=0 go build -mod=readonly -trimpath \
		-ldflags "-s -w -X 'github.com/opentofu/opentofu/version.dev=no'" \
		-o "${tmp}" github.com/opentofu/opentofu/cmd/tofu
)
"${tmp}" version >/dev/null 2>&1 || die "the built tofu does not run"
mv -f "${tmp}" "${ENGINE}"
echo "${want}" >"${STAMP}.tmp.$$"
mv -f "${STAMP}.tmp.$$" "${STAMP}"
log "built $("${ENGINE}" version 2>/dev/null | head -n1) in $((SECONDS - start))s"
echo "${ENGINE}"
