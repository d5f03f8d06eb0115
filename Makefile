# The doors into the house: make run, make test, make lint, make bench.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv run test lint format bench check clean

venv: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	@touch $(STAMP)

run: venv
	@mkdir -p var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py ensure_admin
	@echo "Xump console: http://127.0.0.1:8000/  (Ctrl-C stops it)"
	$(BIN)/python manage.py runserver 127.0.0.1:8000

test: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	@for script in bench/*_bench.py; do \
		echo "== $$script"; $(BIN)/python $$script || exit 1; \
	done

check: venv
	$(BIN)/python manage.py check

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .hypothesis
