#!/usr/bin/env bash
# Builds the web view that `kubectl terrarun ui` serves: the app in web/,
# with the exact packages of web/package-lock.json (npm ci; npm's cache in
# .cache/npm), by Vite into pkg/cmd/plugin/webview/dist, which the plugin
# embeds and git keeps, so that go build alone builds a whole plugin. The
# build is reproducible: the same sources and lockfile give the same files.
#
# Usage: hack/update-webview.sh           rebuild dist/ after changing web/
#        hack/update-webview.sh --verify  fail when dist/ is not what web/ builds (make verify)
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
DIST=${ROOT}/pkg/cmd/plugin/webview/dist
verify=false
[[ ${1:-} == --verify ]] && verify=true

if ! command -v npm >/dev/null; then
  echo "update-webview.sh: npm is missing: install Node.js 20.19 or later with npm (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
cd "${ROOT}/web"
# Only what the lockfile names, as it names it; quietly unless it fails.
if ! out=$(npm ci --no-audit --no-fund --cache "${ROOT}/.cache/npm" 2>&1); then
  echo "${out}" >&2
  echo "update-webview.sh: npm ci failed in web/ (a changed package.json needs npm install there, and the new package-lock.json committed)" >&2
  exit 1
fi
if ! ${verify}; then
  npx --no-install vite build --logLevel warn --outDir "${DIST}" --emptyOutDir
  echo "Built the web view into ${DIST#"${ROOT}"/}."
  exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT
npx --no-install vite build --logLevel warn --outDir "${TMP}/dist" --emptyOutDir
if ! diff -Naupr "${DIST}" "${TMP}/dist"; then
  echo "The web view's build is out of date. Run hack/update-webview.sh and commit pkg/cmd/plugin/webview/dist." >&2
  exit 1
fi
echo "The web view's build is up to date."
