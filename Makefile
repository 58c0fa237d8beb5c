# nymph — build, generate, test. `make test` is everything CI runs.
SHELL := /bin/bash
GO ?= go
GOROOT := $(shell $(GO) env GOROOT)
BIN := $(CURDIR)/bin
FUZZTIME ?= 30s
PKGS := ./...
WASM_PKGS := ./wirecore/...
# The serverless example is tested under js/wasm: its planewasm uses
# syscall/js (planewasi, the wasip1 reactor, is run by its end-to-end test).
JS_PKGS := $(WASM_PKGS) ./examples/serverless/...

.PHONY: all build gen gen-check vet test test-unit test-wasm test-js test-wasip1 testscripts fuzz bench demo clean release

all: build

build:
	$(GO) build -o $(BIN)/nymph ./cmd/nymph

## gen: regenerate msgp codecs and the golden wire vectors.
gen:
	$(GO) generate ./wirecore/...
	$(GO) run ./gen/goldens -out wirecore/wire/testdata

## gen-check: fail when a checked-in generated file is stale.
gen-check:
	$(GO) run ./gen/freshness

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	GOOS=js GOARCH=wasm $(GO) vet ./examples/serverless/...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./examples/serverless/...
	$(GO) tool staticcheck $(PKGS)

## test-unit: unit tests with -race; fuzz seed corpora run here too.
test-unit:
	$(GO) test -race -count=1 -timeout=25m $(PKGS)
	$(GO) test -race -count=1 -tags nymph_mock ./runners/ ./runners/builtin/

test-js:
	GOOS=js GOARCH=wasm $(GO) test -count=1 -timeout=20m -exec=$(GOROOT)/lib/wasm/go_js_wasm_exec $(JS_PKGS)

$(BIN)/wazero: go.mod
	$(GO) build -o $(BIN)/wazero github.com/tetratelabs/wazero/cmd/wazero

test-wasip1: $(BIN)/wazero
	PATH=$(BIN):$$PATH GOWASIRUNTIME=wazero GOOS=wasip1 GOARCH=wasm \
		$(GO) test -count=1 -timeout=20m -exec=$(GOROOT)/lib/wasm/go_wasip1_wasm_exec $(WASM_PKGS)

## test-wasm: every wirecore test under js/wasm (node) and wasip1 (wazero),
## and the serverless example's under js/wasm.
test-wasm: test-js test-wasip1

## test: everything CI runs.
test: gen-check vet test-unit test-wasm

## fuzz: run each fuzz target for FUZZTIME.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; done

bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

## demo: build nymph and run `nymph dev` (serve + daemon + a short tour).
demo: build
	$(BIN)/nymph dev

## release: static, CGO-free binaries for every platform in PLATFORMS,
## named nymph-OS-ARCH-VERSION (no .exe: the name the control plane's
## update URLs use), and DIST/SHA256SUMS over every nymph-* in DIST, so
## `nymph serve --releases DIST` serves them and install.sh checks them.
##   make release VERSION=1.2.3 [DIST=dist] [PLATFORMS="linux/amd64 …"]
DIST ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
release:
	@case "$(VERSION)" in ""|*[!A-Za-z0-9.+_-]*) echo "make release: VERSION=x.y.z (letters, digits and . + _ -) is required" >&2; exit 2;; esac
	@mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; out=$(DIST)/nymph-$$os-$$arch-$(VERSION); \
	  echo "build $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath \
	    -ldflags "-s -w -X main.Version=$(VERSION)" -o $$out.tmp ./cmd/nymph; \
	  mv $$out.tmp $$out; \
	done
	@cd $(DIST) && sha256sum nymph-*-*-* | grep -v '\.tmp$$' > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS
	@echo "$(DIST)/SHA256SUMS:"; cat $(DIST)/SHA256SUMS

clean:
	rm -rf $(BIN)
