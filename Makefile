# terrarun: the commands a developer and CI use. `make help` lists them.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -o errexit -o nounset -o pipefail -c

GO        ?= go
BIN       := $(CURDIR)/bin
DATA_DIR  ?= $(CURDIR)/.terrarun
RUN_FLAGS ?=
GO_TEST   ?= $(GO) test -race
BENCHTIME ?= 1x
BENCH     ?= .
# The build's version, from git: what `terrarun-apiserver --version` and
# `kubectl version` report.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/terrarun/terrarun/pkg/cmd/server.buildVersion=$(VERSION) -X github.com/terrarun/terrarun/pkg/cmd/plugin.buildVersion=$(VERSION)

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# Each target that runs more than go build first checks, with
# hack/requirements.sh, that the machine has what it needs (as root on Debian
# it installs the packages that are missing; otherwise it stops and says what
# to install): a target lists requirements-<target> as its first
# prerequisite, so that nothing runs before the check.
REQUIREMENTS := run codegen verify unit integration images e2e test
.PHONY: $(addprefix requirements-,$(REQUIREMENTS))
$(addprefix requirements-,$(REQUIREMENTS)): requirements-%:
	@hack/requirements.sh $*

# cold_build runs the go build $(3), whose dependencies `$(1)` (a go list with
# the build's environment and flags) lists. When it will take minutes (the
# module cache lacks terrarun's dependencies, or the build cache lacks them
# compiled so; k8s.io/apiserver, the bulk of them, is asked about), it says
# $(2) first, builds with -v so that each package compiled shows, and says
# how long it took.
cold_build = cold=; if [[ -z "$$($(GO) list -m -f '{{.Dir}}' k8s.io/apiserver 2>/dev/null)" || \
	  "$$($(1) -f '{{.Stale}}' k8s.io/apiserver/pkg/server 2>/dev/null)" != false ]]; then cold=-v; echo "$(2)"; fi; \
	start=$$SECONDS; echo "$(3)"; GOFLAGS="$${GOFLAGS:-} $$cold" $(3) && if [[ -n $$cold ]]; then echo "built in $$((SECONDS - start)) s"; fi

.PHONY: build
build: ## Build terrarun-apiserver, terrarun-executor and the kubectl-terrarun plugin (and its kubectl_complete-terrarun link, for kubectl's completion) into bin/.
	@$(call cold_build,$(GO) list,building terrarun into bin/ (the first build downloads and compiles the Go modules: a few minutes; each package shows as it compiles),$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...)
	@ln -sf kubectl-terrarun $(BIN)/kubectl_complete-terrarun

IMAGES    ?= $(BIN)/images
REGISTRY  ?= ghcr.io/terrarun
# IMAGE_TAG is the images' tag: by default the chart's appVersion, the tag
# the chart installs, so that helm install runs what make images built.
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *//p' charts/terrarun/Chart.yaml)
TERRAFORM ?=

.PHONY: images
images: requirements-images ## Build the terrarun-apiserver and terrarun-executor images (OCI layouts and tarballs in bin/images, tagged IMAGE_TAG: the chart's appVersion) without a container runtime; TERRAFORM=path adds terraform to the executor image.
	@$(call cold_build,CGO_ENABLED=0 $(GO) list -trimpath,building the static binaries for the images (a first static build compiles the Go modules again: a few minutes),CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(IMAGES)/static/ ./cmd/terrarun-apiserver ./cmd/terrarun-executor)
	tofu=$$(hack/engine.sh --build) && \
	  $(GO) run ./hack/images -out $(IMAGES) -version $(IMAGE_TAG) -registry $(REGISTRY) \
	    -apiserver $(IMAGES)/static/terrarun-apiserver -executor $(IMAGES)/static/terrarun-executor -tofu "$$tofu" -terraform '$(TERRAFORM)'

.PHONY: engine
engine: ## Find terraform or tofu (or the one TERRARUN_ENGINE names), else build OpenTofu from the Go module proxy into .cache/engine.
	@hack/engine.sh

.PHONY: run
run: requirements-run build ## Start terrarun standalone (embedded etcd, self-signed certificates, admin kubeconfig in .terrarun/); RUN_FLAGS adds server flags.
	@engine=$$(hack/engine.sh) && PATH="$$(dirname "$$engine"):$$PATH" && export PATH && \
	  echo "engine: $$engine" && exec $(BIN)/terrarun-apiserver --standalone --data-dir $(DATA_DIR) $(RUN_FLAGS)

.PHONY: test
test: requirements-test verify unit integration e2e ## Run every test: static checks, codegen verification, unit, integration and end-to-end.

.PHONY: verify
verify: requirements-verify ## gofmt, go vet, generated-code freshness, and the embedded web view's (rebuilt from web/'s lockfile).
	@out=$$(gofmt -l cmd pkg test hack charts); if [[ -n "$$out" ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	hack/verify-codegen.sh
	hack/update-webview.sh --verify

.PHONY: unit
unit: requirements-unit ## Unit tests: the web view's plan diff with node --test; the Go packages' with the race detector (the executor's run against the real engine: terraform and tofu where both exist; the object store against a real S3-compatible server; OCI sources against a real registry), and the chart's with helm; as any user.
	node --test web/src/
	engine=$$(hack/engine.sh) && tofu=$$(hack/engine.sh --build) && helm=$$(hack/helm.sh) && objectstore=$$(hack/objectstore.sh) && registry=$$(hack/registry.sh) && \
	  TERRARUN_ENGINE=$$engine TERRARUN_HELM=$$helm TERRARUN_OBJECTSTORE=$$objectstore TERRARUN_REGISTRY=$$registry TERRARUN_TOFU=$$tofu $(GO_TEST) ./pkg/... ./cmd/... ./charts/... && \
	  if [[ "$$tofu" != "$$engine" ]]; then TERRARUN_ENGINE=$$tofu TERRARUN_REGISTRY=$$registry $(GO_TEST) -count=1 ./pkg/runner/... ./cmd/terrarun-executor/...; fi

FUZZTIME ?= 1m

.PHONY: fuzz
fuzz: ## Fuzz spec validation, the logs and plan options, the plan-JSON redactor, and policy compilation and evaluation, FUZZTIME each (make test runs their seed corpora).
	$(GO) test -run '^$$' -fuzz '^FuzzValidateTerraformRunSpec$$' -fuzztime $(FUZZTIME) ./pkg/apis/terrarun/validation/
	$(GO) test -run '^$$' -fuzz '^FuzzLogAndPlanOptions$$' -fuzztime $(FUZZTIME) ./pkg/apis/terrarun/v1alpha1/
	$(GO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./pkg/runner/planjson/
	$(GO) test -run '^$$' -fuzz '^FuzzCompile$$' -fuzztime $(FUZZTIME) ./pkg/planpolicy/
	$(GO) test -run '^$$' -fuzz '^FuzzEvaluate$$' -fuzztime $(FUZZTIME) ./pkg/planpolicy/

.PHONY: integration
integration: requirements-integration build ## Integration tests: the real server on embedded etcd, driven by the clientset and the real kubectl (KUBECTL, else the one on PATH, else the e2e tools' build); with terraform and tofu where both exist (tofu is built when missing), artifacts in a real S3-compatible server (hack/objectstore.sh), and OCI sources in a real registry (hack/registry.sh).
	engine=$$(hack/engine.sh) && tofu=$$(hack/engine.sh --build) && objectstore=$$(hack/objectstore.sh) && registry=$$(hack/registry.sh) && \
	  if [[ -z $${KUBECTL:-} ]] && ! KUBECTL=$$(command -v kubectl); then KUBECTL=$$(hack/e2e-tools.sh)/kubectl; fi && \
	  KUBECTL=$$KUBECTL TERRARUN_ENGINE=$$engine TERRARUN_TOFU=$$tofu TERRARUN_OBJECTSTORE=$$objectstore TERRARUN_REGISTRY=$$registry TERRARUN_APISERVER=$(BIN)/terrarun-apiserver $(GO_TEST) -count=1 -timeout 30m ./test/integration/...

.PHONY: helm
helm: ## Build helm from hack/tools/helm into .cache/helm (only when the pin changes); make test lints, renders and installs charts/terrarun with it.
	@hack/helm.sh

.PHONY: e2e-tools
e2e-tools: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl from hack/tools into .cache/e2e-tools (only when the pins change).
	@hack/e2e-tools.sh

.PHONY: e2e
e2e: requirements-e2e images ## End-to-end tests (root): the node agent's own tests, with the race detector; then a real cluster in a network namespace (with Flux's source-controller and Tekton Pipelines' controller), terrarun installed by its chart from its images behind an APIService, executor Jobs and TaskRuns, all through kubectl.
	$(GO_TEST) ./test/e2e/nodeagent/...
	tools=$$(hack/e2e-tools.sh) && helm=$$(hack/helm.sh) && objectstore=$$(hack/objectstore.sh) && registry=$$(hack/registry.sh) && flux=$$(hack/flux.sh) && tekton=$$(hack/tekton.sh) && \
	  TERRARUN_E2E_TOOLS=$$tools TERRARUN_IMAGES=$(IMAGES) TERRARUN_HELM=$$helm TERRARUN_OBJECTSTORE=$$objectstore TERRARUN_REGISTRY=$$registry TERRARUN_FLUX=$$flux TERRARUN_TEKTON=$$tekton \
	  $(GO) test -count=1 -timeout 30m ./test/e2e/

.PHONY: bench-ha
bench-ha: images ## Benchmarks of the e2e suite's HA topology (root): leader failover, log follow across replicas, throughput against one replica and node, a trivial run's cost on Jobs and on Tekton; figures go in docs/benchmarks.md.
	tools=$$(hack/e2e-tools.sh) && helm=$$(hack/helm.sh) && tekton=$$(hack/tekton.sh) && \
	  TERRARUN_E2E_TOOLS=$$tools TERRARUN_IMAGES=$(IMAGES) TERRARUN_HELM=$$helm TERRARUN_TEKTON=$$tekton \
	  $(GO) test -count=1 -timeout 6h -run '^$$' -bench '$(BENCH)' -benchtime 1x ./test/e2e/

.PHONY: bench-crd
bench-crd: build ## terrarun side by side with the same objects as a CRD in a real kube-apiserver (root; TERRARUN_E2E_TOOLS=dir uses prebuilt etcd and kube-apiserver): creates, GET, LIST, memory and etcd; BENCH=StoredRuns stores 100,000 runs in that topology instead; figures go in docs/benchmarks.md.
	tools=$${TERRARUN_E2E_TOOLS:-$$(hack/e2e-tools.sh)} && \
	  TERRARUN_E2E_TOOLS=$$tools TERRARUN_APISERVER=$(BIN)/terrarun-apiserver \
	  $(GO) test -count=1 -timeout 180m -run '^$$' -bench '^Benchmark$(if $(filter-out .,$(BENCH)),$(BENCH),CRD)$$' -benchtime 1x ./test/benchcrd/

.PHONY: bench
bench: build ## Benchmarks against the standalone server; figures go in docs/benchmarks.md.
	engine=$$(hack/engine.sh) && objectstore=$$(hack/objectstore.sh) && TERRARUN_ENGINE=$$engine TERRARUN_OBJECTSTORE=$$objectstore TERRARUN_APISERVER=$(BIN)/terrarun-apiserver $(GO) test -count=1 -timeout 60m -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) ./test/bench/...
	$(GO) test -count=1 -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) ./pkg/planpolicy/

.PHONY: codegen
codegen: requirements-codegen ## Regenerate deepcopy, defaults, conversion, openapi, clientset, listers, informers and applyconfigurations.
	hack/update-codegen.sh

.PHONY: clean
clean: ## Remove build output (not the standalone data directory).
	rm -rf $(BIN)
