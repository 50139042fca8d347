# Zygo. `make demo` runs the main job end to end; `make test` runs every test
# (.ci/run calls it). Both install what is missing first (scripts/deps.sh).
GO      ?= go
BIN     := bin
PY      := /usr/bin/python3
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build deps test tidy-check lint demo bench clean install manifests manifests-check controller kube-testenv

all: build

deps:
	./scripts/deps.sh

# bin/zygo-guest is PID 1 of every gVisor sandbox; it must be static. bin/zygo_rand.so is the
# native-randomness guard preloaded into fork-mode Python zygotes (needs gcc). The daemon finds
# both next to bin/zygo.
CC      ?= gcc
RAND_CFLAGS := -shared -fPIC -O2 -Wall -Wextra -Werror

build:
	$(GO) build -o $(BIN)/zygo ./cmd/zygo
	CGO_ENABLED=0 $(GO) build -o $(BIN)/zygo-guest ./cmd/zygo-guest
	@command -v $(CC) >/dev/null 2>&1 || { echo "build: $(CC) not found: the native-randomness guard (bin/zygo_rand.so) needs a C compiler: apt-get install gcc (or run make deps)" >&2; exit 1; }
	$(CC) $(RAND_CFLAGS) -o $(BIN)/zygo_rand.so agents/native/zygo_rand.c agents/native/zygo_fork.c -ldl

# make install [PREFIX=/usr/local] [DESTDIR=]: the three binaries side by side in PREFIX/bin
# (the daemon finds zygo-guest and zygo_rand.so next to zygo; the language agents are embedded
# in it) and the systemd unit in PREFIX/lib/systemd/system (systemd reads /usr/local/lib/...
# too). DESTDIR is prepended to every path written, for packagers; the unit names PREFIX
# only. docs/operations.md: install, configure, upgrade, back up.
PREFIX  ?= /usr/local
DESTDIR ?=
UNITDIR ?= $(PREFIX)/lib/systemd/system

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BIN)/zygo $(BIN)/zygo-guest $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(BIN)/zygo_rand.so $(DESTDIR)$(PREFIX)/bin/
	sed 's|@PREFIX@|$(PREFIX)|g' packaging/zygo.service > $(DESTDIR)$(UNITDIR)/zygo.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/zygo.service

# go.mod and go.sum must be what `go mod tidy` writes (direct dependencies not `// indirect`, no
# stale sums); -diff prints the change and fails instead of writing it.
tidy-check:
	$(GO) mod tidy -diff
	cd sdk/go && $(GO) mod tidy -diff
	cd tools/kube && $(GO) mod tidy -diff

# golangci-lint, pinned, built from the Go module proxy into bin/tools (a cache: installed once
# per checkout; measured on this 2-core machine: 76 s with an empty module cache, downloads
# included; a lint run of the tree then takes about 20 s cold, seconds warm). The rules and
# the reason for each are in .golangci.yml.
GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(BIN)/tools/golangci-lint-$(GOLANGCI_VERSION)

$(GOLANGCI):
	@mkdir -p $(BIN)/tools
	GOBIN=$(abspath $(BIN)/tools/gobin) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(BIN)/tools/gobin/golangci-lint $@

# controller-gen, pinned, built from the Go module proxy into bin/tools like golangci-lint.
# make manifests writes the deep copies of internal/kube/api and the CRDs of deploy/crds from
# the Go types' kubebuilder markers; manifests-check fails when they are not what it writes.
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(BIN)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)

$(CONTROLLER_GEN):
	@mkdir -p $(BIN)/tools
	GOBIN=$(abspath $(BIN)/tools/gobin) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(BIN)/tools/gobin/controller-gen $@

manifests: $(CONTROLLER_GEN)
	$(CONTROLLER_GEN) object paths=./internal/kube/api/...
	$(CONTROLLER_GEN) crd paths=./internal/kube/api/... output:crd:artifacts:config=deploy/crds

manifests-check: manifests
	git diff --exit-code -- deploy/crds internal/kube/api
	@test -z "$$(git status --porcelain -- deploy/crds internal/kube/api)" || { git status --porcelain -- deploy/crds internal/kube/api; echo "manifests-check: run make manifests and commit what it writes" >&2; exit 1; }

# The Kubernetes controller (docs/kubernetes.md); not part of build: only clusters need it.
controller:
	$(GO) build -o $(BIN)/zygo-controller ./cmd/zygo-controller

# The SDK is its own module: linted from its directory with the same configuration.
lint: $(GOLANGCI)
	$(GOLANGCI) run ./...
	cd sdk/go && $(abspath $(GOLANGCI)) run --config ../../.golangci.yml ./...

# The envd API's Go code (internal/e2b/envd/spec/**/*.go) is generated from Zygo's .proto files
# there by buf, protoc-gen-go and protoc-gen-connect-go, all pinned and built from the Go module
# proxy into bin/tools (a cache, as the lint binary; buf takes minutes to build once). The
# output is committed: only `make envd-proto`, after a .proto changes, needs the tools.
BUF_VERSION           := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
CONNECT_GO_VERSION    := v1.21.1
PROTO_TOOLS := $(BIN)/tools/proto-buf$(BUF_VERSION)-go$(PROTOC_GEN_GO_VERSION)-connect$(CONNECT_GO_VERSION)

$(PROTO_TOOLS)/buf:
	@mkdir -p $(PROTO_TOOLS)
	GOBIN=$(abspath $(PROTO_TOOLS)) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	GOBIN=$(abspath $(PROTO_TOOLS)) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(abspath $(PROTO_TOOLS)) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GO_VERSION)

.PHONY: envd-proto
envd-proto: $(PROTO_TOOLS)/buf
	cd internal/e2b/envd/spec && PATH=$(abspath $(PROTO_TOOLS)):$$PATH buf generate


# The real kube-apiserver and etcd of the Kubernetes tests (internal/kube/kubetest), built from
# the Go module proxy into bin/tools/kube/<versions>-<hash>/ once (tools/kube pins them); the
# script prints that directory. A cold build takes minutes: docs/kubernetes-testing.md.
kube-testenv:
	./scripts/kube-testenv.sh

test: deps build tidy-check manifests-check lint kube-testenv
	cd agents/python && $(PY) -m unittest discover -s tests
	cd agents/node && node --test test/
	cd sdk/python && $(PY) -m unittest discover -s tests
	cd sdk/node/zygo-sandbox && node --test test/
	cd sdk/node/zygo && node --test test/
	$(GO) vet ./...
	cd sdk/go && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd sdk/go && GOOS=darwin $(GO) build ./... && GOOS=windows $(GO) build ./...
	GOOS=darwin $(GO) build -o /dev/null ./cmd/zygo && GOOS=windows $(GO) build -o /dev/null ./cmd/zygo
	$(GO) test -count=1 -timeout 40m ./...
	./$(BIN)/zygo check functions
	./$(BIN)/zygo check sandboxes

demo: deps build
	./scripts/demo.sh

clean:
	rm -rf $(BIN)

# Benchmarks: one run, side by side, ratios; writes docs/BENCHMARKS.md.
bench: deps build
	rm -f $(BIN)/bench-daemon.pprof # the daemon never overwrites a profile (O_EXCL)
	$(GO) run ./cmd/zygo-bench -root . -out docs/BENCHMARKS.md -cpuprofile $(BIN)/bench-daemon.pprof
	./scripts/bench-sandbox.sh 2>/dev/null | grep -v ' INFO ' | tee $(BIN)/bench-sandbox.txt
	./scripts/bench-append.sh $(BIN)/bench-sandbox.txt docs/BENCHMARKS.md
	./scripts/bench-e2b.sh | tee $(BIN)/bench-e2b.txt
	{ echo; echo "## E2B's SDK against Zygo's own API (scripts/bench-e2b.sh)"; echo; \
	  echo "The same operations through E2B's npm \`e2b\` (on \`zygo serve --e2b\`) and Zygo's Node SDK, one run, medians."; \
	  echo; cat $(BIN)/bench-e2b.txt; } >> docs/BENCHMARKS.md
