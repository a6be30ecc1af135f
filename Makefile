# Two commands do all the set-up on a fresh machine (see README.md):
#   make demo   builds everything in release and runs the main job
#   make test   builds what the tests need and runs every test
SHELL := /bin/bash
CARGO ?= cargo
NOT_GUESTS := --exclude hostile --exclude echo-v1 --exclude echo-v2 --exclude toy-embedder --exclude embed-probe
GUESTS := -p hostile -p echo-v1 -p echo-v2 -p toy-embedder -p embed-probe

.PHONY: setup components host demo test lint ci bench

setup:
	rustup target add wasm32-wasip2

components: setup
	$(CARGO) build --release --target wasm32-wasip2 $(GUESTS)

host:
	$(CARGO) build --release -p quarry

demo: components host
	./target/release/quarry --config host/demo.toml check
	./target/release/quarry --config host/demo.toml list
	./target/release/quarry --config host/demo.toml call echo '{"text": "hello from a sandboxed component"}'
	./target/release/quarry --config host/demo.toml call sandbox.read_file '{"path": "/wit/README.md"}' | head -3

test: setup
	$(CARGO) build -p quarry
	$(CARGO) test --workspace $(NOT_GUESTS)

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets $(NOT_GUESTS) -- -D warnings
	$(CARGO) clippy --target wasm32-wasip2 $(GUESTS) -- -D warnings

bench: setup
	$(CARGO) bench -p quarry-tests --bench host
