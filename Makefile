# Bulwark: istiod, a security-first control plane for Istio's data plane.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := bin
STATE_DIR ?= .istiod
LDFLAGS := -X main.version=$(VERSION)
BENCH_COUNT ?= 5
BENCHSTAT := $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: run test bench build lint fmt certs unit interop helm image testenv clean

## build: the istiod binary into bin/
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/istiod ./cmd/istiod

## run: istiod on the embedded default (local mode, state in ./.istiod)
run: build
	@echo "istiod: local mode, state in $(STATE_DIR); ports 127.0.0.1:15012 (CSR API), :8080 (/ready), :15014 (/metrics)"
	@echo "first certificate: $(BIN)/istiod mint-cert --state-dir $(STATE_DIR) --namespace default --service-account demo --out-dir $(STATE_DIR)/clients/demo"
	$(BIN)/istiod discovery --state-dir $(STATE_DIR)

## test: every test: gofmt, then unit and end-to-end tests with -race, the
## interop module, the charts. Each go test runs every go vet check
## (-vet=all) on the build it tests, so vet costs no second compile of the
## dependencies (a separate go vet builds them without -race: minutes cold)
test: fmt testenv unit interop helm

## testenv: a real kube-apiserver and etcd, built once from their Go modules into .cache/testenv/bin
testenv:
	hack/testenv/build.sh

unit:
	$(GO) test -race -vet=all -shuffle=on -count=1 -timeout 20m ./...

interop:
	cd test/interop && $(GO) test -race -vet=all -count=1 -timeout 40m ./...

## helm: lint, render and install charts/istiod through Helm's Go module on
## the real apiserver (no -race: a race build of Helm costs minutes, and the
## product code it drives is race-tested in unit), and the image builder
helm: testenv
	cd test/helm && $(GO) test -vet=all -shuffle=on -count=1 -timeout 15m ./...
	cd hack/image && $(GO) test -vet=all -count=1 ./...

## image: bin/istiod-image.tar, istiod's OCI image (no daemon, nothing pulled), tagged with the chart's appVersion
image: build
	cd hack/image && env -u GOOS -u GOARCH $(GO) run . -binary $(CURDIR)/$(BIN)/istiod \
		-chart $(CURDIR)/charts/istiod/Chart.yaml -out $(CURDIR)/$(BIN)/istiod-image.tar \
		-revision $(VERSION) -created $(or $(SOURCE_DATE_EPOCH),0) -os $$($(GO) env GOOS) -arch $$($(GO) env GOARCH)

## lint: go vet and gofmt (must print nothing)
lint: fmt
	$(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: benchmarks, compared with bench/baseline.txt by benchstat. Each
## step's output goes through tee, so pipefail: a step that fails (a
## benchmark, or a package that does not build) stops make bench.
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench: build testenv
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./pkg/... | tee bench/results/unit.txt
	ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -run '^$$' -bench 'BenchmarkCreateCertificate$$' -benchtime 5000x -count $(BENCH_COUNT) -timeout 60m ./test/bench/ | tee bench/results/csr.txt
	ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -run '^$$' -bench 'BenchmarkCreateCertificateKubeJWT' -benchtime 2000x -count $(BENCH_COUNT) -timeout 60m ./test/bench/ | tee bench/results/kubejwt.txt
	ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -run '^$$' -bench 'BenchmarkRootCertDistribution' -benchtime 100x -count $(BENCH_COUNT) -timeout 60m ./test/bench/ | tee bench/results/rootcert.txt
	ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -run '^$$' -bench '^BenchmarkXDS' -benchtime 1x -count $(BENCH_COUNT) -timeout 30m ./test/bench/ | tee bench/results/xds.txt
	cd test/interop && $(GO) test -short -run '^$$' -bench 'Inject$$|SidecarGeneration|GatewayGeneration' -benchmem -count $(BENCH_COUNT) . | tee ../../bench/results/inject-vs-istio.txt
	cd test/interop && ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -short -run '^$$' -bench 'CAServer' -benchtime 5000x -count $(BENCH_COUNT) -timeout 60m . | tee ../../bench/results/ca-vs-istio.txt
	cd test/interop && ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -short -run '^$$' -bench 'FleetVsIstio' -benchtime 1x -timeout 150m . | tee ../../bench/results/fleet-vs-istio.txt
	cd test/interop && ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -short -run '^$$' -bench 'FleetMultiCluster' -benchtime 1x -timeout 150m . | tee ../../bench/results/fleet-multicluster.txt
	cd test/interop && ISTIOD_BIN=$(CURDIR)/$(BIN)/istiod $(GO) test -short -run '^$$' -bench 'GatewaySecretRotation' -benchtime 1x -count $(BENCH_COUNT) -timeout 30m . | tee ../../bench/results/gateway-secret.txt
	cat bench/results/unit.txt bench/results/csr.txt bench/results/kubejwt.txt bench/results/rootcert.txt bench/results/xds.txt bench/results/inject-vs-istio.txt bench/results/ca-vs-istio.txt bench/results/fleet-vs-istio.txt bench/results/fleet-multicluster.txt bench/results/gateway-secret.txt > bench/results/new.txt
	$(BENCHSTAT) baseline=bench/baseline.txt new=bench/results/new.txt

## certs: a sample root and intermediate CA for plugged-in CA demos, in certs/out/
certs:
	$(GO) run ./certs/mkcerts -out certs/out

clean:
	rm -rf $(BIN) bench/results certs/out
