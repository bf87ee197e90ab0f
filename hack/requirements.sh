#!/usr/bin/env bash
# Checks that this machine has what a make target needs, before the target
# runs anything: the Makefile calls it first. It prints nothing when all is
# there. When something is missing:
#
#   - as root on a host with apt-get (Debian, Ubuntu), it installs the Debian
#     packages that provide it, saying what and why, and checks again;
#   - otherwise, or when something is missing that no package provides (Go,
#     root, a Debian host for the images), it stops at once and lists what is
#     missing, why each is needed and the command that installs it.
#
# What it does not check is built with Go alone, from the Go module proxy,
# when missing: terraform or tofu (hack/engine.sh), helm (hack/helm.sh),
# kubectl and the e2e control plane (hack/e2e-tools.sh).
#
# Usage: hack/requirements.sh [--dry-run] TARGET
#   TARGET     run, codegen, verify, unit, integration, images, e2e or test
#   --dry-run  install nothing: say what it would install, and fail
#
# (No bash 4 features: an old bash, as macOS has, runs it too.)
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "${ROOT}"

log() { echo "requirements.sh: $*" >&2; }
usage="usage: hack/requirements.sh [--dry-run] run|codegen|verify|unit|integration|images|e2e|test"

dry_run=false
if [[ ${1:-} == --dry-run ]]; then
	dry_run=true
	shift
fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -o/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 0
fi
[[ $# -eq 1 ]] || { log "${usage}"; exit 2; }
target=$1

# needs prints what a target needs, its prerequisites' needs included: make
# e2e builds the images first, and make test runs verify, unit, integration
# and e2e. Names may repeat; each is checked once.
needs() {
	case $1 in
	run) echo "go certs" ;;
	codegen) echo "go certs protoc" ;;
	verify) echo "go certs git protoc npm" ;;
	unit) echo "go certs cc git flock npm" ;;
	integration) echo "go certs cc git curl chromium" ;;
	images) echo "go certs git ssh ca-bundle debian" ;;
	e2e) echo "$(needs images) cc flock ip root" ;;
	test) echo "$(needs verify) $(needs unit) $(needs integration) $(needs e2e)" ;;
	*) return 1 ;;
	esac
}
needs "${target}" >/dev/null || { log "unknown target ${target} (${usage})"; exit 2; }

# The one place that says, for each requirement, why it is needed and which
# Debian packages provide it (none: remedy says what to do), and checks it.
go_version=$(awk '$1 == "go" { print $2; exit }' go.mod)
about() {
	packages="" remedy=""
	case $1 in
	go)
		why="builds terrarun, and OpenTofu, helm and the e2e control plane when they are missing"
		remedy="install Go ${go_version} or later (go.mod's go line) and put its bin directory on PATH"
		if command -v go >/dev/null; then # there, but it fails: say how
			local out
			out=$(go env GOVERSION 2>&1 | tr -s '\t\n' '  ') || true
			remedy="$(command -v go) fails here (${out% }); ${remedy}"
		fi
		;;
	certs)
		why="go downloads the modules from the Go module proxy over HTTPS"
		packages=ca-certificates
		;;
	cc)
		why="go test -race needs cgo: a C compiler (go env CC) and the C library's headers"
		packages="gcc libc6-dev"
		;;
	protoc)
		why="hack/verify-codegen.sh (make verify, part of make test) regenerates the protobuf encoding with it"
		packages=protobuf-compiler
		;;
	git)
		why="hack/verify-codegen.sh lists the tree with it, the runner's tests clone repositories, make images puts it in the executor image"
		packages=git
		;;
	curl)
		why="the integration tests' sandbox attack probes etcd's port with it"
		packages=curl
		;;
	npm)
		why="hack/update-webview.sh --verify (make verify) rebuilds the web view from web/package-lock.json with Node.js and npm; make unit tests its plan diff with node --test"
		packages="nodejs npm"
		;;
	chromium)
		why="the web view's tests drive a real browser: Debian's Chromium, headless"
		packages=chromium
		;;
	flock)
		why="hack/helm.sh serializes its builds with it"
		packages=util-linux
		;;
	ip)
		why="the e2e suite runs in a network namespace of its own (ip netns)"
		packages=iproute2
		;;
	ssh)
		why="make images puts ssh in the executor image, for ssh git sources"
		packages=openssh-client
		;;
	ca-bundle)
		why="make images puts /etc/ssl/certs/ca-certificates.crt in the images"
		packages=ca-certificates
		;;
	debian)
		why="make images takes the executor's userland (sh, git, ssh, their libraries) from the host's Debian packages (dpkg, ldd)"
		remedy="build the images on a Debian or Ubuntu host"
		;;
	root)
		why="the e2e suite creates a network namespace, and the node agent's tests run containers in mount namespaces"
		remedy="run it as root, e.g. sudo env \"PATH=\$PATH\" make ${target}"
		;;
	esac
}
has() {
	case $1 in
	go) command -v go >/dev/null && go env GOVERSION >/dev/null 2>&1 ;;
	certs) has_certs ;;
	cc) has_cc ;;
	ca-bundle) [[ -f /etc/ssl/certs/ca-certificates.crt ]] ;;
	debian) command -v dpkg >/dev/null && command -v dpkg-query >/dev/null && command -v ldd >/dev/null ;;
	root) [[ $(id -u) -eq 0 ]] ;;
	*) command -v "$1" >/dev/null ;; # protoc, git, curl, flock, ip, ssh, npm, chromium
	esac
}
# has_certs: a CA bundle where Go looks for one on Linux (crypto/x509's
# root_linux.go), or one that SSL_CERT_FILE or SSL_CERT_DIR names.
has_certs() {
	[[ $(uname -s) != Linux || -n ${SSL_CERT_FILE:-} || -n ${SSL_CERT_DIR:-} ]] && return 0
	local f
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/ca-bundle.pem \
		/etc/pki/tls/cacert.pem /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem /etc/ssl/cert.pem; do
		[[ -f ${f} ]] && return 0
	done
	return 1
}
# has_cc: go's C compiler runs and finds the C library's headers.
has_cc() {
	local cc
	cc=$(go env CC 2>/dev/null) && [[ -n ${cc} ]] || cc=gcc
	read -r -a cc <<<"${cc}"
	command -v "${cc[0]}" >/dev/null && printf '#include <stdlib.h>\n' | "${cc[@]}" -E -x c - >/dev/null 2>&1
}

# missing prints the requirements of the target that this machine lacks.
missing() {
	local r seen=" "
	for r in $(needs "${target}"); do
		[[ ${seen} == *" ${r} "* ]] && continue
		seen+="${r} "
		has "${r}" || printf '%s ' "${r}"
	done
}

# describe prints each requirement named, its packages and why it is needed.
describe() {
	local r
	for r in "$@"; do
		about "${r}"
		printf '  %-10s %s%s\n' "${r}" "${packages:+(Debian: ${packages}) }" "${why}" >&2
	done
}

lacking=$(missing)
[[ -z ${lacking} ]] && exit 0

# The Debian packages that provide what is missing, each once, and what no
# package provides.
install="" unpackaged=""
for r in ${lacking}; do
	about "${r}"
	[[ -n ${packages} ]] || unpackaged+="${r} "
	for p in ${packages}; do
		[[ " ${install}" == *" ${p} "* ]] || install+="${p} "
	done
done
install=${install% } unpackaged=${unpackaged% }

# As root with apt-get, when packages are all that is missing: install them
# (as CI does), then check again. (The lists are words: unquoted on purpose.)
if [[ $(id -u) -eq 0 && -z ${unpackaged} ]] && command -v apt-get >/dev/null; then
	if ${dry_run}; then
		log "make ${target} needs what this machine lacks; --dry-run: would install ${install} with apt-get, for:"
		describe ${lacking}
		log "--dry-run: would run: apt-get update -qq && apt-get install -y -qq ${install}"
		exit 1
	fi
	log "make ${target} needs what this machine lacks; installing ${install} with apt-get, for:"
	describe ${lacking}
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${install}
	lacking=$(missing)
	[[ -z ${lacking} ]] && exit 0
	log "still missing after apt-get install:"
	describe ${lacking}
	exit 1
fi

# Otherwise stop, and say what to do.
log "make ${target} cannot run: this machine lacks"
describe ${lacking}
if [[ -n ${install} ]]; then
	sudo="sudo "
	[[ $(id -u) -eq 0 ]] && sudo=""
	where=""
	command -v apt-get >/dev/null || where=" (Debian and Ubuntu package names; elsewhere, what provides them)"
	log "install the packages${where} with:"
	echo "    ${sudo}apt-get install -y ${install}" >&2
fi
for r in ${unpackaged}; do
	about "${r}"
	log "${r}: ${remedy}"
done
exit 1
