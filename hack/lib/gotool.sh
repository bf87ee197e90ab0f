# Sourced by the scripts that build a tool from a tools module of its own
# (hack/tools/<name>/go.mod pins it) into .cache/<name>/: flux.sh, helm.sh,
# objectstore.sh and registry.sh. gotool_build prints the tool's absolute path on stdout and
# nothing else; progress goes to stderr. It builds only when the pin changes
# (a stamp records the sha256 of go.mod and go.sum), once at a time (flock).
#
# gotool_build SCRIPT NAME BINARY MODULE PACKAGE CHECK [LDFLAGS] [REBUILD]
#   SCRIPT   the calling script's name, for messages
#   NAME     hack/tools/NAME and .cache/NAME
#   BINARY   the binary's file name in .cache/NAME
#   MODULE   the module whose pinned version is built
#   PACKAGE  the main package to build
#   CHECK    a function called with the built binary and the module's
#            version, which must succeed
#   LDFLAGS  extra -ldflags, "{version}" replaced likewise
#   REBUILD  true to build even when the stamp is fresh
#
# gotool_args SCRIPT ARGS... parses a script's arguments (none, --rebuild or
# --help, which prints the script's header) and sets rebuild to true or
# false.

gotool_args() {
	local script=$1
	shift
	rebuild=false
	case "${1:-}" in
	"") ;;
	--rebuild) rebuild=true ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
		exit 0
		;;
	*)
		echo "${script}: unknown argument ${1} (usage: hack/${script} [--rebuild])" >&2
		exit 1
		;;
	esac
}

gotool_build() {
	local script=$1 name=$2 binary=$3 module=$4 pkg=$5 check=$6 ldflags=${7:-} rebuild=${8:-false}
	local root moddir cachedir bin stamp want version tmp start
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
	moddir="${root}/hack/tools/${name}"
	cachedir="${root}/.cache/${name}"
	bin="${cachedir}/${binary}"
	stamp="${cachedir}/${binary}.stamp"
	log() { echo "${script}: $*" >&2; }

	want=$(cat "${moddir}/go.mod" "${moddir}/go.sum" | sha256sum | cut -d' ' -f1)
	fresh() { [[ -x ${bin} && -f ${stamp} && "$(cat "${stamp}")" == "${want}" ]]; }
	if ! ${rebuild} && fresh; then
		echo "${bin}"
		return 0
	fi

	command -v go >/dev/null 2>&1 || { log "go is needed to build ${binary}"; return 1; }
	mkdir -p "${cachedir}"
	# Serialize concurrent builds; the loser of the race finds the build fresh.
	exec 9>"${cachedir}/.lock"
	flock 9
	if ! ${rebuild} && fresh; then
		echo "${bin}"
		return 0
	fi

	version=$(cd "${moddir}" && GOWORK=off go list -m -f '{{.Version}}' "${module}")
	log "building ${binary} ${version} from hack/tools/${name} into .cache/${name} (takes minutes on a cold cache)"
	tmp="${bin}.tmp.$$"
	# shellcheck disable=SC2064 # tmp is expanded now: it is local
	trap "rm -f '${tmp}'" EXIT
	start=${SECONDS}
	(
		cd "${moddir}"
		GOWORK=off CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath \
			-ldflags "-s -w ${ldflags//\{version\}/${version}}" -o "${tmp}" "${pkg}"
	)
	"${check}" "${tmp}" "${version}" || { log "the built ${binary} does not run as ${version} should"; return 1; }
	mv -f "${tmp}" "${bin}"
	echo "${want}" >"${stamp}.tmp.$$"
	mv -f "${stamp}.tmp.$$" "${stamp}"
	log "built ${binary} ${version} in $((SECONDS - start))s"
	echo "${bin}"
}
