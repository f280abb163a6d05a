# Set-up and common jobs. `make demo` and `make test` each install first, so
# either works on a fresh machine (see README.md).
PYTHON ?= python3
PIP := $(PYTHON) -m pip

# The tests of the neural stages, which CI also runs as on an AVX2 CPU without bf16 (RETRIEVAL_EMULATE_CPU).
MODEL_TESTS := tests/test_precision.py tests/test_dense.py tests/test_late.py tests/test_qa.py

.PHONY: install demo test test-avx2 lint docs bench

install:
	# torch==2.13.0 is the CPU wheel here; installing it first stops any
	# dependency from pulling a multi-gigabyte CUDA build.
	$(PIP) install --quiet 'torch==2.13.0'
	$(PIP) install --quiet -e '.[all,test]'

demo: install
	retrieval run configs/cacm.yaml

test: install lint docs
	# Debian's Chromium renders the HTML report in the report test (needs root).
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "warning: chromium not installed; the report screenshot test will fail"
	# two workers, one test file each at a time (its module fixtures built once); the collections' indexes
	# are built once for both (tests/conftest.py shared_dir)
	$(PYTHON) -m pytest -q -n 2 --dist loadfile --durations=20
	# Most CPUs lack bf16 and AVX-512: where this one has either, the model tests run again as on an
	# AVX2 CPU (the package's choices and torch's kernels both capped).
	if RETRIEVAL_EMULATE_CPU= RETRIEVAL_NO_BF16= $(PYTHON) -c "import sys; from retrieval.runtime.precision import \
		cpu_flags; f = cpu_flags(); sys.exit(not ('avx2' in f and {'avx512f', 'avx512_bf16', 'amx_bf16'} & f))"; \
		then $(MAKE) --no-print-directory test-avx2; fi

test-avx2:
	RETRIEVAL_EMULATE_CPU=avx2 $(PYTHON) -m pytest -q -n 2 --dist loadfile $(MODEL_TESTS)

lint:
	$(PYTHON) -m ruff check retrieval tests eval examples docs
	# the package's layers (pyproject.toml [tool.importlinter]): each imports only those below it, no circles
	lint-imports

# The documentation site (mkdocs.yml, docs/): any warning fails the build. The CLI reference and the
# results pages are generated from the parsers and eval/results/ as it builds; tests/test_docs.py runs
# the README's and the tutorials' code blocks.
docs:
	# not --quiet: mkdocs then stops counting warnings, and --strict passes whatever they say
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

bench: install
	$(PIP) install --quiet -e '.[bench]'
	$(PYTHON) eval/bench_sparse.py
	$(PYTHON) eval/bench_backends.py
	$(PYTHON) eval/parity_sparse.py
	$(PYTHON) eval/parity_backends.py
	$(PYTHON) eval/bench_dense.py
	$(PYTHON) eval/bench_precision.py
	$(PYTHON) eval/bench_kernels.py
	$(PYTHON) eval/bench_shards.py
	# longer: eval/bench_late.py, eval/bench_qa.py, eval/reliability.py
