# The doors into the house: make run, make test, make lint, make bench.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# requirements.txt, and requirements-dev.txt etc. should the tools ever be split out
REQUIREMENTS := $(sort $(wildcard requirements*.txt))
PYTEST_ARGS ?=
ADDRESS ?= 127.0.0.1:8000

.PHONY: venv run test soak lint format bench check clean

venv: $(STAMP)

# reinstall only when a requirements file is newer than the last install
$(STAMP): $(REQUIREMENTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "cannot create a virtualenv: apt-get install python3-venv"; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(addprefix -r ,$(REQUIREMENTS))
	@touch $(STAMP)

# migrate, collect static files, an admin login, Redis (XUMP_REDIS_URL, or a redis-server
# started under var/redis/), then web + worker + beat from the Procfile until Ctrl-C
run: venv
	@ADDRESS=$(ADDRESS) VENV=$(VENV) bash scripts/run.sh

# redis-server, Java 17 and Chromium installed with apt when missing (scripts/ensure_test_tools.sh);
# the tests run in TEST_WORKERS processes (pytest-xdist: each its own servers, see
# tests/conftest.py; four keep this 2-core machine busier than three: the servers' waits
# leave it idle otherwise), and the slowest 25 are listed after every run
TEST_WORKERS ?= 4
test: venv
	@bash scripts/ensure_test_tools.sh
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

# the fault suite at the size of README's fault table (20,000 messages a fault; make test
# runs it with 10,000)
soak: venv
	@bash scripts/ensure_test_tools.sh
	XUMP_FAULT_MESSAGES=20000 $(BIN)/python -m pytest --durations=25 tests/faults

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# every bench/*.py is a script that prints figures (files starting with _ are helpers)
bench: venv
	@found=0; for script in bench/[!_]*.py; do \
		[ -e "$$script" ] || continue; found=1; \
		echo "== $$script"; $(BIN)/python "$$script" || exit 1; \
	done; \
	[ $$found = 1 ] || echo "no scripts in bench/ yet: nothing to measure"

check: venv
	$(BIN)/python manage.py check

# caches and the virtualenv only: var/ holds the database and stays
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .import_linter_cache .benchmarks
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
