# Set-up and common jobs. `make demo` and `make test` each install first, so
# either works on a fresh machine (see README.md).
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test lint bench

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

lint:
	$(PYTHON) -m ruff check retrieval tests eval

bench: install
	$(PIP) install --quiet -e '.[bench]'
	$(PYTHON) eval/bench_sparse.py
	$(PYTHON) eval/bench_backends.py
	$(PYTHON) eval/parity_sparse.py
	$(PYTHON) eval/parity_backends.py
	$(PYTHON) eval/bench_dense.py
	$(PYTHON) eval/bench_shards.py
	# longer: eval/bench_late.py, eval/bench_qa.py, eval/reliability.py
