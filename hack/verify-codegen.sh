#!/usr/bin/env bash
# Fails when the generated code is not what hack/update-codegen.sh produces now.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "${SCRIPT_ROOT}"
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

# Regenerate inside a copy of the tree so the working tree is never touched.
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "${TMP}" 2>/dev/null || true
(cd "${TMP}" && hack/update-codegen.sh >/dev/null)

ret=0
for d in pkg hack/api-rules-violations.list; do
  diff -Naupr "${SCRIPT_ROOT}/${d}" "${TMP}/${d}" || ret=$?
done
if [[ ${ret} -ne 0 ]]; then
  echo "Generated code is out of date. Run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
echo "Generated code is up to date."
