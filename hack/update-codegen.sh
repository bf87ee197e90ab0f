#!/usr/bin/env bash
# Regenerates every generated file of terrarun with k8s.io/code-generator, at the
# version pinned in go.mod: deepcopy, defaults, conversion, openapi, clientset,
# listers, informers and applyconfigurations.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "${SCRIPT_ROOT}"
# `go list -m -f {{.Dir}}` prints nothing for a module that is not in the module
# cache yet (a fresh machine): download it first, at the version go.mod pins.
if [[ -z ${CODEGEN_PKG:-} ]]; then
    go mod download k8s.io/code-generator
    CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
fi
if [[ ! -f ${CODEGEN_PKG}/kube_codegen.sh ]]; then
    echo "update-codegen.sh: k8s.io/code-generator has no kube_codegen.sh in '${CODEGEN_PKG}'; check the module cache (go env GOMODCACHE) or set CODEGEN_PKG" >&2
    exit 1
fi
THIS_PKG="github.com/terrarun/terrarun"
BOILERPLATE="${SCRIPT_ROOT}/hack/boilerplate.go.txt"

# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"

kube::codegen::gen_openapi \
    --output-dir "${SCRIPT_ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --report-filename "${SCRIPT_ROOT}/hack/api-rules-violations.list" \
    --update-report \
    --output-model-name-file "zz_generated.model_name.go" \
    --extra-pkgs k8s.io/api/core/v1 \
    --extra-pkgs k8s.io/api/authorization/v1 \
    --extra-pkgs k8s.io/api/authentication/v1 \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run "${THIS_PKG}/pkg/generated/openapi/cmd/models-schema") \
    --output-dir "${SCRIPT_ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"
