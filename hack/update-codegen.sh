#!/usr/bin/env bash
# Regenerates every generated file of terrarun with k8s.io/code-generator, at the
# version pinned in go.mod: deepcopy, defaults, conversion, openapi, clientset,
# listers, informers, applyconfigurations and the protobuf encoding
# (generated.proto, generated.pb.go and the protobuf struct tags). Protobuf
# needs protoc (Debian: apt-get install protobuf-compiler).
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


# Protobuf, as for Kubernetes' built-in types: go-to-protobuf writes
# generated.proto from the Go types (numbering fields by their protobuf struct
# tags, adding tags to new fields), protoc compiles it with protoc-gen-gogo, and
# go-to-protobuf rewrites the result into generated.pb.go (the marshalling
# code, without the gogo runtime). The tools resolve packages by import path
# under one source root, as in a GOPATH: a temporary one links this module,
# the apimachinery and api modules whose .proto files ours import, and gogo's
# (gogo.proto, descriptor.proto).
if ! command -v protoc >/dev/null; then
    echo "update-codegen.sh: protoc not found; install it (Debian: apt-get install protobuf-compiler) and run again" >&2
    exit 1
fi
PROTO_ROOT=$(mktemp -d)
trap 'rm -rf "${PROTO_ROOT}"' EXIT
go build -o "${PROTO_ROOT}/bin/" \
    k8s.io/code-generator/cmd/go-to-protobuf \
    k8s.io/code-generator/cmd/go-to-protobuf/protoc-gen-gogo \
    golang.org/x/tools/cmd/goimports
for mod in k8s.io/apimachinery k8s.io/api github.com/gogo/protobuf; do
    mkdir -p "${PROTO_ROOT}/src/$(dirname "${mod}")"
    go mod download "${mod}"
    ln -s "$(go list -m -f '{{.Dir}}' "${mod}")" "${PROTO_ROOT}/src/${mod}"
done
mkdir -p "${PROTO_ROOT}/src/$(dirname "${THIS_PKG}")"
ln -s "${SCRIPT_ROOT}" "${PROTO_ROOT}/src/${THIS_PKG}"
# A leading "-" names a package whose .proto is imported, not generated.
PATH="${PROTO_ROOT}/bin:${PATH}" go-to-protobuf \
    --go-header-file "${BOILERPLATE}" \
    --apimachinery-packages "-k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1" \
    --packages "-k8s.io/api/core/v1,${THIS_PKG}/pkg/apis/terrarun/v1alpha1" \
    --output-dir "${PROTO_ROOT}/src" \
    --proto-import "${PROTO_ROOT}/src" \
    --proto-import "${PROTO_ROOT}/src/github.com/gogo/protobuf/protobuf"
