# Set-up and common jobs. `make demo` and `make test` each install first, so
# either works on a fresh machine (see README.md).
PYTHON ?= python3
PIP := $(PYTHON) -m pip

# The tests of the neural stages, which CI also runs as if the CPU lacked bf16 (RETRIEVAL_NO_BF16=1).
MODEL_TESTS := tests/test_precision.py tests/test_dense.py tests/test_late.py tests/test_qa.py

.PHONY: install demo test test-no-bf16 lint bench

install:
	# torch==2.13.0 is the CPU wheel here; installing it first stops any
	# dependency from pulling a multi-gigabyte CUDA build.
	$(PIP) install --quiet 'torch==2.13.0'
	$(PIP) install --quiet -e '.[all,test]'

demo: install
	retrieval run configs/cacm.yaml

test: install
	# Debian's Chromium renders the HTML report in the report test (needs root).
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "warning: chromium not installed; the report screenshot test will fail"
	$(PYTHON) -m pytest -q
	# Most CPUs lack bf16: where this one has it, the model tests run again as if it did not.
	if RETRIEVAL_NO_BF16= $(PYTHON) -c "import sys; from retrieval.precision import cpu_has_bf16; \
		sys.exit(not cpu_has_bf16())"; then $(MAKE) --no-print-directory test-no-bf16; fi

test-no-bf16:
	RETRIEVAL_NO_BF16=1 $(PYTHON) -m pytest -q $(MODEL_TESTS)

lint:
	$(PYTHON) -m ruff check retrieval tests eval

bench: install
	$(PIP) install --quiet -e '.[bench]'
	$(PYTHON) eval/bench_sparse.py
	$(PYTHON) eval/bench_backends.py
	$(PYTHON) eval/parity_sparse.py
	$(PYTHON) eval/parity_backends.py
	$(PYTHON) eval/bench_dense.py
	$(PYTHON) eval/bench_precision.py
	$(PYTHON) eval/bench_shards.py
	# longer: eval/bench_late.py, eval/bench_qa.py, eval/reliability.py
