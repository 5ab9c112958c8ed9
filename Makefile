# weft's build, run and test entry points. On a fresh Debian machine with Go
# (see GO_MIN) and make, 'make up' and 'make test' install whatever else they
# need: tools go into ./bin (never global), Debian packages only when running
# as root.

SHELL := /bin/bash
export GOTOOLCHAIN := local

GO       ?= go
GO_MIN   := 1.26
BIN      := $(CURDIR)/bin
DATA     ?= $(if $(HOME),$(HOME)/.weft,/tmp/weft-data)

# Pinned tool versions (docs/decisions.md says why).
STATICCHECK_VERSION   := v0.7.0
PROTOC_GEN_GO_VERSION := v1.36.12

.PHONY: all build up test lint fmt-check vet staticcheck proto tools fuse-deps check-go clean

all: build

## build: compile bin/weft
build: check-go
	$(GO) build -o $(BIN)/weft ./cmd/weft

## up: build and run a single-machine cluster with its data in $(DATA)
up: build
	$(BIN)/weft up --data "$(DATA)"

## test: formatting, vet, staticcheck, then every test with the race detector
test: check-go fuse-deps lint
	$(GO) test -race -timeout 12m ./...

lint: fmt-check vet staticcheck

fmt-check: check-go
	@files=$$(find . -name '*.go' -not -name '*.pb.go' -not -path './bin/*' -not -path './.git/*' -print0 | xargs -0 gofmt -l); \
	if [ -n "$$files" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$files"; exit 1; \
	fi

vet: check-go
	$(GO) vet ./...

staticcheck: tools
	$(BIN)/staticcheck ./...

## tools: install the pinned staticcheck into ./bin unless it is already there
tools: check-go
	@if ! "$(BIN)/staticcheck" -version 2>/dev/null | grep -q '($(STATICCHECK_VERSION))'; then \
		echo "installing staticcheck $(STATICCHECK_VERSION) into $(BIN)"; \
		GOBIN="$(BIN)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi

# FUSE tests need fusermount3. Install it only as root and only if missing;
# otherwise those tests skip themselves.
fuse-deps:
	@if [ ! -x /usr/bin/fusermount3 ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing fuse3"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3; \
		else \
			echo "note: /usr/bin/fusermount3 is missing (install fuse3 as root); FUSE tests will be skipped"; \
		fi; \
	fi

## proto: regenerate proto/weftpb from proto/*.proto (the output is committed)
proto: check-go
	@if ! command -v protoc >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing protobuf-compiler"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; \
		else \
			echo "make proto: protoc is missing; install Debian's protobuf-compiler"; exit 1; \
		fi; \
	fi
	@if ! "$(BIN)/protoc-gen-go" --version 2>/dev/null | grep -q ' $(PROTOC_GEN_GO_VERSION)$$'; then \
		echo "installing protoc-gen-go $(PROTOC_GEN_GO_VERSION) into $(BIN)"; \
		GOBIN="$(BIN)" $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION); \
	fi
	PATH="$(BIN):$$PATH" protoc -I proto --go_out=proto/weftpb --go_opt=paths=source_relative proto/*.proto

check-go:
	@command -v $(GO) >/dev/null || { echo "weft needs Go $(GO_MIN) or newer: https://go.dev/dl/"; exit 1; }
	@v=$$($(GO) env GOVERSION); case "$$v" in \
		go1.2[6-9]*|go1.[3-9][0-9]*|go[2-9]*) ;; \
		*) echo "weft needs Go $(GO_MIN) or newer, found $$v: https://go.dev/dl/"; exit 1;; \
	esac

clean:
	rm -rf $(BIN)
