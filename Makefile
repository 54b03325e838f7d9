# The two commands a new user needs: `make demo` and `make test`.
# The Pythons idemdash supports (pyproject.toml, docs/install.md), newest first: the one the
# venv was made with while it runs and is supported, else the newest one that runs (`python3`
# last, when it is one of them); `make test PYTHON=...` names another. Each candidate is run,
# not just looked up, as a pyenv shim of a version pyenv has not selected exists but fails; and
# the venv is kept because `make install PYTHON=...` made it so, when the newest on PATH is older.
SUPPORTED_PYTHONS := 3.13 3.12 3.11
SUPPORTED_CHECK := import sys; sys.exit(f"{sys.version_info[0]}.{sys.version_info[1]}" not in "$(SUPPORTED_PYTHONS)".split())
VENV := .venv
ifndef PYTHON
PYTHON := $(shell $(VENV)/bin/python -c '$(SUPPORTED_CHECK)' >/dev/null 2>&1 \
	&& $(VENV)/bin/python -c 'import sys; print(sys._base_executable)')
ifeq ($(PYTHON),)
PYTHON := $(shell for p in $(addprefix python,$(SUPPORTED_PYTHONS)) python3; do \
	$$p -c '$(SUPPORTED_CHECK)' >/dev/null 2>&1 && { $$p -c 'import sys; print(sys.executable)'; break; }; done)
endif
endif
BIN := $(VENV)/bin
# The stamp names what was installed (extras, Python): a `make test EXTRAS=...` or `PYTHON=...`
# that differs from the last install installs again instead of finding the old stamp fresh.
comma := ,
STAMP = $(VENV)/.installed-$(subst $(comma),+,$(EXTRAS))-$(notdir $(PYTHON))
# The extras installed, and a pip constraints file for the install: .ci/run makes the oldest
# end of the range it proves with `VENV=var/venv-oldest CONSTRAINTS=.ci/oldest.txt
# EXTRAS=dev,bench` (under var/, which the docs' tests do not read).
EXTRAS ?= dev
CONSTRAINTS ?=

.PHONY: demo test test-all install migrate bench soak clean

$(STAMP): pyproject.toml clients/python/pyproject.toml $(CONSTRAINTS)
	@test -n "$(PYTHON)" && $(PYTHON) -c '$(SUPPORTED_CHECK)' 2>/dev/null || { \
	echo "idemdash needs Python 3.11, 3.12 or 3.13;" $(if $(PYTHON),"PYTHON=$(PYTHON) is not one of them.", \
	"none was found (tried $(addprefix python,$(SUPPORTED_PYTHONS)) python3 on PATH).") >&2; \
	echo "Install one, or name it: make $(or $(MAKECMDGOALS),install) PYTHON=/path/to/python3.x" >&2; exit 1; }
	@echo "idemdash: $(VENV) on $$($(PYTHON) -V) ($(PYTHON))"
	@# A venv made by another Python (the one picked changed) is made anew.
	$(PYTHON) -c 'import sys; sys.exit(open("$(VENV)/pyvenv.cfg").read().find("version = %d.%d." % sys.version_info[:2]) < 0)' 2>/dev/null \
	|| $(PYTHON) -m venv --clear $(VENV)
	@# uv installs what pip would (the same versions), fetching in parallel: 26 to 30 s with
	@# the bytecode compiled, where pip took about 50 without, mostly waiting on the index one
	@# package after another. It reads UV_*
	@# settings, not pip.conf (docs/development.md). The Python client's distribution
	@# (clients/python), which idemdash depends on, in the same command: taken from the folder
	@# instead of an index. The bytecode is compiled on every core: left to the first run, each
	@# test worker compiled what it imported, about 40 s more for `make test` on two cores.
	$(BIN)/python -m pip install --quiet 'uv>=0.13'
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e clients/python -e '.[$(EXTRAS)]' --config-settings editable_mode=compat $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS))
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# The demo's SECRET_KEY and webhook secrets, from var/demo.env (made once, before any
# settings load: they refuse to start without a strong key); values already set win.
DEMO_ENV = set -a; . "$$($(BIN)/python -m idemdash.devtools.demo_env)"; set +a
# The demo runs the production settings plus the devtools app (its commands, the demo's
# webhook handlers, models and admin); every process honcho starts inherits this.
DEMO_SETTINGS = export DJANGO_SETTINGS_MODULE=idemdash.devtools.settings

migrate: install
	$(DEMO_ENV); $(DEMO_SETTINGS); $(BIN)/python manage.py migrate --noinput

# `make test` is the fast tier: every test not marked `slow`, on SQLite unless DATABASE_URL
# says otherwise, in random order (pytest-randomly) on one pytest-xdist worker per core, each on
# databases of its own; `make test-all` adds the slow tier (real processes, servers, kills,
# Chromium, packaging venvs): docs/development.md says which to run when. Bytecode is written
# even where PYTHONDONTWRITEBYTECODE is set: without it every worker would compile the project
# and rewrite every test module's asserts again, about 20 s each.
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
test: install
	$(PYTEST) -n auto --dist worksteal -m "not slow" $(PYTEST_ARGS)

test-all: install
	$(PYTEST) -n auto --dist worksteal $(PYTEST_ARGS)

# The production stack (Procfile: gunicorn, qcluster) plus the traffic simulator, on the
# embedded SQLite file, with static files collected for WhiteNoise to serve. The outbox may
# post to the simulator's receiver on 127.0.0.1, added to any OUTBOX_HTTP_ALLOWED_HOSTS given.
demo: install
	@$(DEMO_ENV); $(DEMO_SETTINGS); set -e; \
	export OUTBOX_HTTP_ALLOWED_HOSTS="$${OUTBOX_HTTP_ALLOWED_HOSTS:+$$OUTBOX_HTTP_ALLOWED_HOSTS,}127.0.0.1"; \
	$(BIN)/python manage.py demo_setup; \
	echo "idemdash: open http://127.0.0.1:$${IDEMDASH_PORT:-8000}/ and log in as admin (the admin site is at /admin/); Ctrl-C stops everything"; \
	exec $(BIN)/honcho start

# `make bench` (idemdash.devtools.bench.settings: the demo's settings plus the bench app)
# measures on PostgreSQL (DATABASE_URL, else postgres://postgres@127.0.0.1:5432/idemdash_bench)
# and writes var/bench/; `make bench QUICK=1` is the under-two-minutes version CI runs;
# `make bench ONLY=1,2` runs only those scenarios (it leaves var/bench/latest.* alone);
# `make bench RECEIPTS=10000000 ONLY=5,11,6` seeds 10 M receipts by SQL for the pages, search and purge. The dev
# extra carries the bench's own dependencies (DRF, drf-idempotency).
bench: install
	$(BIN)/python -m idemdash.devtools.bench $(if $(QUICK),--quick) $(if $(ONLY),--only $(ONLY)) $(if $(RECEIPTS),--receipts $(RECEIPTS))

# `make soak` (idemdash/devtools/soak/run.py): claims, replays, webhook deliveries and outbox
# messages through two web instances and two worker clusters on PostgreSQL (DATABASE_URL, else
# postgres://postgres@127.0.0.1:5432/idemdash_soak) while workers are SIGKILLed and database
# backends terminated; 10 minutes unless SOAK_SECONDS says otherwise. Writes var/soak/<time>/.
soak: install
	$(BIN)/python -m idemdash.devtools.soak $(if $(SOAK_SECONDS),--seconds $(SOAK_SECONDS))

clean:
	rm -rf $(VENV) var
