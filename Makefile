# make test: vet and race-enabled tests against real redis-server processes,
# one package at a time (-p 1): the library's and the CLI's timing tests,
# run side by side on a 2-core machine, starve each other.
# make demo: the inventory demo on a throwaway redis-server.
# Both install redis-server (Debian package) when it is missing.

GO ?= go

.PHONY: test demo bench redis-server

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server (Debian package)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; \
	  else \
	    echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install -y redis-server) and run make again"; exit 1; \
	  fi; }

test: redis-server
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 1 -timeout 25m ./...
	cd examples/sqlfence && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd otel && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd examples/observability && $(GO) vet ./... && $(GO) test -race -count=1 ./...

demo: redis-server
	$(GO) build -o bin/distlock ./cmd/distlock
	./bin/distlock demo

# make bench BENCHFLAGS=-quick for a shorter run
bench: redis-server
	cd bench && $(GO) run . $(BENCHFLAGS)
