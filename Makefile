# The README's two commands: `make demo` and `make test`.
.PHONY: setup demo test test-all lint docs bench down chaos wheel

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/kappa demo

# lint (ruff, ruff format --check, mypy) and the documentation site run first: a test run is
# also a lint run and a docs build
test: lint docs
	.venv/bin/python -m pytest -q

test-all: lint docs
	.venv/bin/python -m pytest -q -m ''

# the documentation site (mkdocs.yml, docs/) into site/: --strict fails on a broken link, a
# missing page or a reference page that cannot be generated from the code (not --quiet: it
# hides the warnings --strict counts); builds offline
docs: setup
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) .venv/bin/mkdocs build --strict

lint: setup
	.venv/bin/ruff check kappaplus tests bench
	.venv/bin/ruff format --check kappaplus tests bench
	.venv/bin/mypy kappaplus

bench: setup
	.venv/bin/python bench/bench_backfill.py
	.venv/bin/python bench/bench_kafka.py
	.venv/bin/python bench/bench_hive.py
	.venv/bin/python bench/bench_codec.py
	.venv/bin/python bench/bench_protobuf.py
	.venv/bin/python bench/bench_read_path.py --docs
	.venv/bin/python bench/bench_iceberg.py
	.venv/bin/python bench/bench_delta.py
	.venv/bin/python bench/bench_archive.py

chaos: setup
	.venv/bin/python tests/chaos/chaos.py --scenarios 13

down: setup
	.venv/bin/kappa down

# the wheel carries the JVM reader's jar (built by setup): pip install it on drivers and workers
wheel: setup
	.venv/bin/python -m pip wheel . --no-deps -w dist
