# The two commands a new user needs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test install migrate bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "idemdash needs Python 3.11, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
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

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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
# `make bench ONLY=1,2` runs only those scenarios (it leaves var/bench/latest.* alone). The dev
# extra carries the bench's own dependencies (DRF, drf-idempotency).
bench: install
	$(BIN)/python -m idemdash.devtools.bench $(if $(QUICK),--quick) $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf $(VENV) var
