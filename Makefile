# Model gateway. Two commands on a fresh machine:
#   make run    start Envoy, the sidecar and fake vendors on 127.0.0.1:8080
#   make test   build, install what is missing, run every test suite
# Test tiers by place: make unit runs every package outside test/ (needs
# nothing but Go; under a minute), make e2e runs test/... (real processes);
# make test runs lint and unit first, so that a mistake fails in a minute.
SHELL := /bin/bash
GO    ?= go
VENV  := .venv
PY    := $(VENV)/bin/python
ENVOY := $(VENV)/bin/envoy
BIN   := bin
# The price catalogue: LiteLLM's model_prices_and_context_window.json as
# shipped in this litellm release on PyPI (the Dockerfile reads the version
# from this line). gateway.yaml's `catalogue` names the extracted file.
LITELLM_VERSION := 1.109.1
CATALOGUE_DIR   := .cache/catalogue
# Bounded fuzzing in `make test`; raise for a longer local run.
FUZZTIME ?= 4s
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BUF         := github.com/bufbuild/buf/cmd/buf@v1.57.0
# Envoy Gateway's CLI, whose `egctl x translate` turns deploy/envoy-gateway
# into the Envoy configuration Envoy Gateway would serve (make egctl-check;
# built from source, about 20 minutes on 2 cores, so not part of make
# test); the version of the API types in deploy/go.mod (a test checks).
EGCTL_VERSION := v1.9.1
EGCTL         := $(VENV)/bin/egctl
# The release: the newest "## X.Y.Z (date)" heading of CHANGELOG.md, linked
# into the binaries (docs/releasing.md; the Dockerfile reads it the same way).
VERSION := $(shell sed -En 's/^## ([0-9]+\.[0-9]+\.[0-9]+) .*/\1/p' CHANGELOG.md | head -n1)
LDFLAGS := -X github.com/modelgateway/gateway/internal/version.Release=$(VERSION)

export ENVOY_BIN ?= $(abspath $(ENVOY))
export EGCTL_BIN ?= $(abspath $(EGCTL))

.PHONY: catalogue envoy-config deploy-render egctl egctl-check all build run test unit race cc e2e conformance fuzz bench bench-smoke proto proto-check deps envoy redis postgres chromium clients lint clean

all: build

## deps: download Go modules (the sidecar's, and deploy/'s own module of manifest checks)
deps:
	$(GO) mod download
	cd deploy && $(GO) mod download

## catalogue: extract the pinned price catalogue into .cache/catalogue (once per version)
catalogue:
	@if [ "$$(cat $(CATALOGUE_DIR)/VERSION 2>/dev/null)" != "$(LITELLM_VERSION)" ]; then \
	  set -e; command -v python3 >/dev/null || { echo "python3 is required"; exit 1; }; \
	  rm -rf $(CATALOGUE_DIR)/wheel; mkdir -p $(CATALOGUE_DIR)/wheel; \
	  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	    litellm==$(LITELLM_VERSION) -d $(CATALOGUE_DIR)/wheel; \
	  python3 -c 'import glob, sys, zipfile; w = glob.glob(sys.argv[1] + "/litellm-*.whl")[0]; \
	    open(sys.argv[2], "wb").write(zipfile.ZipFile(w).read("litellm/model_prices_and_context_window_backup.json"))' \
	    $(CATALOGUE_DIR)/wheel $(CATALOGUE_DIR)/model_prices_and_context_window.json; \
	  rm -rf $(CATALOGUE_DIR)/wheel; echo $(LITELLM_VERSION) > $(CATALOGUE_DIR)/VERSION; \
	  echo "price catalogue: litellm $(LITELLM_VERSION) -> $(CATALOGUE_DIR)/model_prices_and_context_window.json"; \
	fi

## build: the binaries into bin/ (gateway, gateway-local, gatewayctl, fakevendor)
build: deps catalogue
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/gateway ./cmd/gateway-local ./cmd/gatewayctl ./cmd/fakevendor

## envoy: install the pinned Envoy (and the SDKs used by the tests) into .venv
envoy: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	@command -v python3 >/dev/null || { echo "python3 is required"; exit 1; }
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@$(ENVOY) --version | grep -m1 .
	@touch $@

## egctl-check: Envoy Gateway's own translation of deploy/envoy-gateway, validated by envoy --mode validate (builds egctl first)
egctl-check: egctl envoy
	cd deploy && EGCTL_REQUIRED=1 $(GO) test -count=1 -run 'Egctl|EnvoyGateway' ./...

## egctl: Envoy Gateway's CLI (EGCTL_VERSION) into .venv/bin, built from source (a large build, then cached)
egctl: $(VENV)/.egctl-$(EGCTL_VERSION)
$(VENV)/.egctl-$(EGCTL_VERSION):
	@mkdir -p $(VENV)/bin
	GOBIN=$(abspath $(VENV)/bin) $(GO) install github.com/envoyproxy/gateway/cmd/egctl@$(EGCTL_VERSION)
	@touch $@

# $(call APT_INSTALL,PACKAGES) installs Debian packages, with sudo unless root: what
# the targets below run when what they need is missing.
APT_INSTALL = { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(1) >/dev/null; }

## redis: install redis-server (and jq, which the README's examples use) from Debian's packages when missing
redis:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v jq >/dev/null || $(call APT_INSTALL,redis-server redis-tools jq)
	@redis-server --version

## postgres: install PostgreSQL's server binaries from Debian's packages when missing (the ledger sink's tests start one)
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || $(call APT_INSTALL,postgresql)
	@ls /usr/lib/postgresql/*/bin/postgres

## chromium: install Debian's chromium (the consoles' browser tests) when missing
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || $(call APT_INSTALL,chromium)
	@$$(command -v chromium || command -v chromium-browser) --version

## clients: install the JavaScript packages the tests run (test/clients: the OpenAI SDK, the Codex CLI, Node 22 and the OpenID Connect provider oidc-provider, pinned by its package-lock.json) from npm, once per lock file
CLIENTS := test/clients
clients:
	@if [ ! -f $(CLIENTS)/node_modules/.package-lock.json ] || [ $(CLIENTS)/package-lock.json -nt $(CLIENTS)/node_modules/.package-lock.json ]; then \
	  command -v npm >/dev/null || { echo "npm is required (Debian: apt-get install npm)"; exit 1; }; \
	  cd $(CLIENTS) && npm ci --no-audit --no-fund --loglevel=error; \
	fi
	@$(CLIENTS)/node_modules/.bin/node --version >/dev/null

## run: the gateway on listeners.public, 127.0.0.1:8080 (in-memory store; fake vendors unless vendor keys are set); CONFIG=file and RUN_ARGS=flags of gateway-local, e.g. RUN_ARGS=--port-offset=100
CONFIG ?= gateway.yaml
RUN_ARGS ?=
run: build envoy
	$(BIN)/gateway-local --config $(CONFIG) $(RUN_ARGS)

## test: everything, fastest first: lint and the unit tier, the race detector over the concurrent code, then every test that starts real processes (Redis, Envoy, PostgreSQL, Chromium, the SDKs), fuzz and bench smoke
test: lint unit
	$(MAKE) --no-print-directory race
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory bench-smoke

## unit: the fast tier: every package outside test/ (they start no process) and deploy's manifest checks
unit: deps
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/test/')
	cd deploy && $(GO) test -short -count=1 ./...
	cd deploy/monitoring && $(GO) test -count=1 ./...

## race: the unit tests of the code whose goroutines share state (the processor, the store, spool, settler, renewer, alerts, consoles, commands) under the race detector; the wire-format packages are single-goroutine and left out (minutes under -race)
race: deps cc
	CGO_ENABLED=1 $(GO) test -race -count=1 ./extproc/ ./internal/... ./cmd/...

## cc: install a C compiler from Debian's packages when missing (the race detector links with cgo)
cc:
	@command -v gcc >/dev/null || $(call APT_INSTALL,gcc libc6-dev)

# The money suites of test/e2e (conservation, the last dollar, limits across
# two sidecars, budgets, faults, partition, background responses, rate and
# daily limits, spool replay, sweep) run a second time with limits.leases off
# (GATEWAY_TEST_LEASES; on is the default; under 2 minutes on 2 cores), so
# that both ways of admission are tested. TestLeases* are not repeated: they
# turn leases on themselves.
MONEY_TESTS := ^(TestConservation|TestLimitsConservationTwoSidecars|TestKeyLimitChangedWhileRunning|TestConcurrentRequestsAgainstSmallBalance|TestReducedConcurrentRequestsAgainstSmallBalance|TestBudget|TestFault|TestBackgroundResponse|TestRateLimit|TestDailyLimit|TestSpoolReplayEqualsLedgerEntry|TestSweptRequestKeepsPricedModel)

## e2e: the tests that start real processes: test/... (end to end through Envoy, the integration tests on real Redis, Cluster, TLS, PostgreSQL and `envoy --mode validate`, SDK conformance), the money suites again with leases off, and deploy's checks against a real Envoy
#
# Two test processes at a time, as `go test -p 2` runs them on 2 cores:
# test/e2e but its drills in one; in the other, test/e2e's drills, the rest
# of test/..., the money suites with leases off and deploy's checks, one
# after the other (their output is printed when the first ends).
E2E_OTHERS = $$($(GO) list ./test/... | grep -v '/test/e2e$$')
# The fixed-length load and fault drills of test/e2e (about 260 s), run in
# the second process, so that the two take about as long.
E2E_DRILLS := ^(TestLeasesPartitionPastTheLease|TestLeasesFreezePastTheLease|TestLeasesConserveUnderLoad|TestFailoverDrill|TestOps|TestFailoverOnErrors)
e2e: build envoy redis postgres chromium clients
	@mkdir -p $(BIN); rm -f $(BIN)/e2e-others.log; \
	( set -e; $(GO) test -count=1 -timeout 10m -run '$(E2E_DRILLS)' ./test/e2e; \
	  $(GO) test -count=1 -p 1 -timeout 15m $(E2E_OTHERS); \
	  GATEWAY_TEST_LEASES=off $(GO) test -count=1 -timeout 10m -run '$(MONEY_TESTS)' ./test/e2e; \
	  cd deploy && $(GO) test -count=1 ./... ) > $(BIN)/e2e-others.log 2>&1 & others=$$!; \
	rc=0; $(GO) test -count=1 -timeout 15m -skip '$(E2E_DRILLS)' ./test/e2e || rc=$$?; \
	orc=0; wait $$others || orc=$$?; cat $(BIN)/e2e-others.log; \
	if [ $$rc != 0 ] || [ $$orc != 0 ]; then echo "e2e failed: test/e2e exit $$rc, the others exit $$orc"; exit 1; fi

## lint: formatting, go vet and staticcheck (pinned; fetched from the Go module proxy)
lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd deploy && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...
	cd deploy/monitoring && $(GO) vet ./...
	@$(MAKE) --no-print-directory proto-check

## fuzz: each fuzz target for FUZZTIME (seed corpora also run in plain `go test`).
## A failure that saved a crashing input fails at once; an engine failure that
## saved none (a worker starved on a loaded machine, or the coordinator's
## "context deadline exceeded" race at the -fuzztime boundary, golang/go#75804,
## fixed in Go 1.27) is shown and retried, three tries in all. The targets' speeds
## differ by three orders of magnitude, so the budget is a time, not a count.
fuzz:
	@mkdir -p $(BIN); set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for t in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$dir $$t ($(FUZZTIME))"; \
	    for try in 1 2 3; do \
	      if $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$dir > $(BIN)/fuzz.log 2>&1; then break; fi; \
	      cat $(BIN)/fuzz.log; \
	      if [ -n "$$(git status --porcelain $$dir/testdata)" ] || [ $$try = 3 ]; then exit 1; fi; \
	      echo "fuzz engine failed without a crashing input; retrying $$t (try $$try of 3)"; \
	    done; \
	  done; \
	done

## bench: the full benchmark against bare Envoy; writes test/bench/results.md.
## BENCH_ARGS adds options, e.g. BENCH_ARGS="-trace-percent 1 -sink -webhook-down" (tracing at 1 %, the ledger
## sink running, alerts sent to a receiver that never answers)
bench: build envoy redis postgres
	$(GO) build -o $(BIN)/bench ./test/bench
	GATEWAY_BIN_DIR=$(abspath $(BIN)) $(BIN)/bench -out test/bench/results.md $(BENCH_ARGS)

bench-smoke: build envoy redis postgres
	GATEWAY_BIN_DIR=$(abspath $(BIN)) $(GO) run ./test/bench -smoke -trace-percent 1 -sink -webhook-down -out $(BIN)/bench-smoke.md

## proto: regenerate the admin API's Go code with buf (proto/buf.gen.yaml; pinned generators from the Go module proxy)
proto:
	cd proto && $(GO) run $(BUF) generate

## proto-check: fail when the committed generated code is not what `make proto` writes
proto-check:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	  (cd proto && $(GO) run $(BUF) generate -o $$tmp) && \
	  for f in $$(cd $$tmp && find * -name '*.go'); do cmp -s $$tmp/$$f proto/$$f || { echo "proto/$$f is stale: run make proto"; exit 1; }; done

clean:
	rm -rf $(BIN) .run

## envoy-config: render envoy/envoy.yaml, envoy/envoy-demo.yaml (docker-compose), deploy/k8s/configmaps.yaml and the control-plane renderings and chart (as deploy-render) from gateway.yaml
envoy-config: build
	$(BIN)/gateway envoy-config --config gateway.yaml --compose .
	cd deploy && $(GO) run ./gen -root ..

## deploy-render: the Kubernetes renderings of gateway.yaml: deploy/k8s's generated parts, the control-plane renderings (deploy/sidecar, deploy/envoy-gateway, deploy/istio) and the Helm chart's templates (deploy/helm/gateway)
deploy-render:
	cd deploy && $(GO) run ./gen -root ..

## conformance: the official SDKs against the real gateway
conformance: build envoy redis
	$(GO) test -count=1 ./test/conformance/
