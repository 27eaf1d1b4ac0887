# Endo's build. Everything it fetches or builds lands in .cache/ (git-ignored), so reruns are fast.
SHELL := /bin/bash
CACHE := $(CURDIR)/.cache
BIN := $(CACHE)/bin
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
export GOFLAGS := -buildvcs=false
export PATH := $(BIN):$(PATH)

GO_SOURCES := $(shell find . -name '*.go' -not -path './.cache/*') go.mod go.sum
TENANTS := $(basename $(notdir $(wildcard tenants/*.c)))

.PHONY: all build deps stub tenants test vet hello bench sched-perf sched-fair demo clean

all: build

# Debian packages and the containerd tools the tests and the demo run against.
deps:
	@bash integration/tools.sh $(CACHE)

build: $(BIN)/endo $(BIN)/containerd-shim-endo-v1

$(BIN)/endo: $(GO_SOURCES) crossing/stub/stub.bin
	@mkdir -p $(BIN)
	go build -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/endo

$(BIN)/containerd-shim-endo-v1: $(GO_SOURCES)
	@mkdir -p $(BIN)
	go build -o $@ ./cmd/containerd-shim-endo-v1

# The stub is committed; this rebuilds it from its source (a test checks they agree).
stub:
	sh crossing/stub/build.sh crossing/stub/stub.bin

$(CACHE)/tenants/bin/%: tenants/%.c
	@mkdir -p $(dir $@)
	gcc -static -O2 -Wall -pthread -o $@ $<

tenants: $(addprefix $(CACHE)/tenants/bin/,$(TENANTS))

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	go vet ./...

# Every package's tests, one package at a time: several of them check that no stub process,
# mount or cgroup is left on the machine, which needs the machine to themselves.
test: deps build vet
	go test -p 1 -count=1 -timeout 20m ./...

# A static hello in a sandbox, with the crossing timings the sandbox logs at start.
hello: build $(CACHE)/tenants/bin/hello
	@mkdir -p $(CACHE)/hello-root/bin
	@cp $(CACHE)/tenants/bin/hello $(CACHE)/hello-root/bin/hello
	$(BIN)/endo run -v --rootfs $(CACHE)/hello-root -- /bin/hello

# Benchmarks with ratios to native measured in the same run, then the kernelet's tables.
bench: deps build tenants
	$(BIN)/endo bench --tenants $(CACHE)/tenants
	go test -run XXX -bench ContainerStart -benchtime 10x ./integration/
	$(MAKE) --no-print-directory sched-perf sched-fair

# The kernelet's costs (yield, wake-ups, kicks) beside Linux's.
sched-perf: build tenants
	$(BIN)/endo sched-perf --tenants $(CACHE)/tenants

# Two-level fairness: a sibling cgroup of equal weight against the sandbox running 1, 50, and
# 50 tasks plus a lock holder (about two minutes).
sched-fair: build tenants
	$(BIN)/endo sched-fair --tenants $(CACHE)/tenants

# The main job: a real containerd running a container in Endo.
demo: deps build
	bash integration/demo.sh

clean:
	rm -rf $(CACHE)
