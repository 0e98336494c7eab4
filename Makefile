# Only Go is needed: xcaddy runs through `go run` at a pinned version, and
# builds Caddy with this plugin from the checkout in this directory.
#
#   make run     build Caddy with the plugin and serve the demo (foreground)
#   make test    vet, gofmt check and the whole test suite with -race
#   make bench   the benchmarks
#   make build   only the binary, into bin/caddy

MODULE        := github.com/sessionkeeping/caddy-session-keeping
CADDY_VERSION := v2.11.9
XCADDY        := go run github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
CADDY         := bin/caddy
DEMO          := examples/demo/Caddyfile

# Rebuild the binary when the plugin's sources change.
SOURCES := $(shell find . -name '*.go' ! -name '*_test.go' ! -path './bin/*') go.mod go.sum

.PHONY: run test bench microbench build clean

run: $(CADDY)
	$(CADDY) run --config $(DEMO) --adapter caddyfile

build: $(CADDY)

# The plugin comes from this directory (=.). With the placeholder version
# @v0.0.0 Go uses the local copy even when the module proxy refuses to list
# the plugin's versions; a bare =. needs the proxy to answer "not found".
$(CADDY): $(SOURCES) Makefile
	@mkdir -p $(dir $@)
	CADDY_VERSION=$(CADDY_VERSION) $(XCADDY) build --output $@ --with $(MODULE)@v0.0.0=.

test:
	go vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt -l: these files need formatting:"; echo "$$unformatted"; exit 1; \
	fi
	go test -race -count=1 -timeout 20m ./...

# The benchmark program (bench/): real Caddy processes, overhead and
# affinity; it writes BENCHMARKS.md and bench/affinity.svg. Pass flags with
# BENCHFLAGS, for example make bench BENCHFLAGS='-part overhead'.
bench:
	go run ./bench $(BENCHFLAGS)

# The Go micro-benchmarks of the packages.
microbench:
	go test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
