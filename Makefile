# Quick start: `make demo` and `make test`. Both set up .venv on their own.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# hey, the HTTP load generator of seed 003, built from source into the project
HEY    := .tools/bin/hey
# Litestream, for `litegate bench replication` and its short check in make test
LITESTREAM := .tools/bin/litestream
# SQLAlchemy 2.0 (the previous release line) for make test-sqlalchemy-full
SQLA20 := .venv-sqla20

.PHONY: litestream demo test lint typecheck unit docs chromium fuse redis django-suite django-cache-suite test-django-full test-django-matrix test-matrix test-oldest-newest test-durability soak sqlalchemy-suite test-sqlalchemy-full bench-core bench-queue bench-queue-pg bench-queue-scale bench-tasks bench-cache bench-web bench-replication hey clean

# The product (src/, every extra) and the lab (lab/, the litegate-lab
# distribution: litegate bench and litegate web), both editable.
$(STAMP): pyproject.toml lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,django,sqlalchemy,ops,postgres,docs]' -e lab
	touch $(STAMP)

$(HEY):
	GOBIN=$(CURDIR)/.tools/bin GOFLAGS=-modcacherw go install github.com/rakyll/hey@v0.1.5

hey: $(HEY)

# Built from the Go module proxy as hey is; where Go is missing, say so and go
# on (the replication check in make test then skips with the same message).
$(LITESTREAM):
	@if command -v go >/dev/null 2>&1; then \
		GOBIN=$(CURDIR)/.tools/bin GOFLAGS=-modcacherw go install \
			github.com/benbjohnson/litestream/cmd/litestream@v0.5.18; \
	else \
		echo "Go is missing: litestream is not built, and the replication checks will skip"; \
	fi

litestream: $(LITESTREAM)

# The showcase, then the quick version of each lab experiment (~3 minutes).
demo: $(STAMP) $(HEY) redis
	$(PY) demo/showcase.py --seconds 3
	$(VENV)/bin/litegate bench contention --quick --out results/demo-contention
	$(VENV)/bin/litegate bench fairness --quick --out results/demo-fairness
	$(VENV)/bin/litegate bench micro --quick --out results/demo-micro
	$(VENV)/bin/litegate bench queue --quick --out results/demo-queue
	$(VENV)/bin/litegate bench tasks --quick --out results/demo-tasks
	$(VENV)/bin/litegate bench cache --quick --out results/demo-cache
	$(VENV)/bin/litegate bench web --quick --out results/demo-web

test: lint typecheck unit django-suite django-cache-suite sqlalchemy-suite

lint: $(STAMP)
	$(VENV)/bin/ruff check src lab/src lab/probes tests demo
	$(VENV)/bin/ruff format --check src lab/src lab/probes tests demo

typecheck: $(STAMP)
	$(VENV)/bin/mypy src lab/src lab/probes tests demo

# pytest runs everything under tests/, the documentation's build and browser
# check (tests/docs) included.
unit: $(STAMP) $(HEY) $(LITESTREAM) fuse redis chromium
	$(VENV)/bin/pytest

# The documentation site (MkDocs + Material, the API reference from the
# docstrings by mkdocstrings) into site/; a warning fails it: a broken link,
# a missing anchor, a reference it cannot resolve. make test builds it too
# (tests/docs) and opens three of its pages in headless Chromium.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Debian's chromium for the documentation's browser check (tests/docs):
# installed where missing (as root, with apt-get); elsewhere the check skips
# and says so.
chromium:
	@if command -v chromium >/dev/null 2>&1; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the documentation's browser check"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
			|| echo "apt-get could not install chromium: the documentation's browser check will skip"; \
	else \
		echo "chromium is missing and this is not root with apt-get: the documentation's browser check will skip"; \
	fi

# The product's unit tests (tests/litegate) on the other supported Pythons,
# 3.10, 3.12 and 3.13, each in its own venv (.venv-py310, ...) with the
# extras that install there; make test covers the default one (3.11).
test-matrix:
	bash tests/matrix.sh 3.10 3.12 3.13

# CI's share of it: the oldest and the newest.
test-oldest-newest:
	bash tests/matrix.sh 3.10 3.13

# libfuse 3 for the power-cut filesystem of `bench durability` and its tests:
# from the distribution's packages where missing (as root, with apt-get).
# Where it cannot be had, those tests skip and say why; nothing else needs it.
fuse:
	@if command -v fusermount3 >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3'; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing libfuse 3 (Debian's fuse3) for the power-cut tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null) \
			|| echo "apt-get could not install fuse3: the power-cut tests will skip"; \
	else \
		echo "libfuse 3 is missing and this is not root with apt-get: the power-cut tests will skip"; \
	fi

# Debian's redis-server for `bench cache` and `bench web --cache` (RedisCache,
# the comparison) and their tests: installed where missing (as root, with
# apt-get). Where it cannot be had, redis is left out of those with a note.
redis:
	@if command -v redis-server >/dev/null 2>&1; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's redis-server for the cache bench"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
			|| echo "apt-get could not install redis-server: the cache bench leaves redis out"; \
	else \
		echo "redis-server is missing and this is not root with apt-get: the cache bench leaves redis out"; \
	fi

# Issue 21's long run: 200 power cuts per profile at random moments, writers on
# the core API, the queue and Django; fails if a target is missed (30-50 minutes).
# Heavy (five writer processes and the filesystem on the CPUs): run it alone.
test-durability: $(STAMP) fuse
	$(VENV)/bin/litegate bench durability --cuts 200 --out results/durability
	$(PY) -c "import json, sys; r = json.load(open('results/durability/durability.json')); \
		bad = [t for t in r['targets'] if not t['met']]; \
		[print('MISSED:', t['target'], '--', t['value']) for t in bad]; sys.exit(1 if bad else 0)"

# The chaos soak of the write gate (tests/litegate/soak.py; make test runs 8 s
# of it): workers of every policy, fork and spawn, SIGKILLed and SIGSTOPped
# wherever they are; fails on a stall, a hang, an acknowledged write lost or a
# broken bound in the grant log (5 minutes; SOAK_SECONDS=N for longer).
SOAK_SECONDS ?= 300
soak: $(STAMP)
	$(PY) -m tests.litegate.soak --seconds $(SOAK_SECONDS)

# Django's own test suite (issue 8's label set, ~3,900 tests) against
# litegate.django and the stock sqlite3 engine in the same run, with Django's
# parallel runner (--parallel 2, cloned test databases): fails if litegate
# fails a test the stock engine passes (~45 s).
django-suite: $(STAMP)
	$(PY) tests/django_suite/run.py

# Django's own cache tests (cache.tests.BaseCacheTests, from its source
# distribution) against litegate.django.cache.LitegateCache, on its own file
# and in the app's database, and DBCacheTests against DatabaseCache in the
# same invocation: fails if LitegateCache fails a test DatabaseCache passes
# (~30 s).
django-cache-suite: $(STAMP)
	$(PY) tests/django_suite/cache_run.py

# The same on Django 4.2 LTS (python3) and Django 6.x (python3.13), each in
# its own venv (.venv-django42, .venv-django6), then tests/litegate/django
# on each; ~5 minutes.
test-django-matrix:
	bash tests/django_suite/matrix.sh

# Django's whole suite, both engines (long; not part of make test).
test-django-full: $(STAMP)
	$(PY) tests/django_suite/run.py --all --parallel 2

# SQLAlchemy's dialect compliance suite (sqlalchemy.testing.suite) against
# sqlite+litegate and sqlite+litegate_async at once, SQLAlchemy 2.1; fails on
# any failure (~1 minute).
sqlalchemy-suite: $(STAMP)
	$(PY) tests/sqlalchemy_suite/run.py

$(SQLA20)/.installed:
	$(PYTHON) -m venv $(SQLA20)
	$(SQLA20)/bin/python -m pip install --quiet --upgrade pip
	$(SQLA20)/bin/python -m pip install --quiet "SQLAlchemy[asyncio]>=2.0,<2.1" "aiosqlite>=0.20" "pytest>=8"
	touch $@

# SQLAlchemy's own SQLite-relevant tests (dialect, transactions, pool,
# session, asyncio, from its source distribution) on the stock drivers and on
# litegate's in the same run, failing ids compared; SQLAlchemy 2.1 (.venv),
# then 2.0 ($(SQLA20)); ~20 minutes.
test-sqlalchemy-full: $(STAMP) $(SQLA20)/.installed
	$(PY) tests/sqlalchemy_suite/run.py --full; a=$$?; \
	$(SQLA20)/bin/python tests/sqlalchemy_suite/run.py --full; b=$$?; \
	test $$a -eq 0 -a $$b -eq 0

# The two comparisons of the core's closing note: 50 threads on 5 read
# connections against SQLAlchemy's QueuePool, and 8 processes x 4 threads
# writing while a parent holds the gate ~1 s, against sqlite3.connect(timeout=5).
bench-core: $(STAMP)
	$(VENV)/bin/litegate bench fairness --pools sqlalchemy,litegate --threads 50 \
		--requests 3000 --runs 3 --out results/core-fairness
	$(VENV)/bin/litegate bench contention --modes sqlite-default,litegate,litegate-strict --cells 8/4/1 \
		--parent same --runs 3 --out results/core-contention

# Seed 004 in full: the five scenarios under the three profiles, the long run
# and the end-to-end rows, litegate.queue against sqlite3, huey and litequeue
# (~15 minutes).
bench-queue: $(STAMP)
	$(VENV)/bin/litegate bench queue --out results/queue-full

# Issue 11: the end-to-end rows on both backends in one run, SQLite and a
# throwaway PostgreSQL 15 server (litegate.queue against procrastinate and
# pgqueuer there), 3 runs each (~10 minutes).
bench-queue-pg: $(STAMP)
	$(VENV)/bin/litegate bench queue --backend sqlite,postgres --scenarios e2e --runs 3 \
		--out results/queue-pg

# Issue 21: the queue's costs against its backlog, 10 thousand to 10 million
# jobs, on SQLite (~5 minutes) then a throwaway PostgreSQL server (each
# backend stops before a size it cannot finish within 15 minutes).
bench-queue-scale: $(STAMP)
	$(VENV)/bin/litegate bench queue --scale --backend sqlite,postgres --scale-budget 900 \
		--out results/queue-scale

# Django's tasks API: litegate.django.tasks against django-tasks-db on the
# stock engine, 3 runs (~2 minutes).
bench-tasks: $(STAMP)
	$(VENV)/bin/litegate bench tasks --runs 3 --out results/tasks

# Issue 37: Django's cache backends (LitegateCache, DatabaseCache,
# FileBasedCache, RedisCache on a throwaway redis-server) in one run, every
# workload, both value sizes, six PxT cells, 3 runs (~30 minutes).
bench-cache: $(STAMP) redis
	$(VENV)/bin/litegate bench cache --runs 3 --out results/cache

# Seed 003 in full, the app in Django (gunicorn; four engine configurations)
# and in FastAPI (uvicorn; three): the headline cell three times, the balanced
# sweep 1..256, read_heavy / write_heavy at c = 20 and 64 (~25 minutes).
bench-web: $(STAMP) $(HEY)
	$(VENV)/bin/litegate bench web --out results/web

# Issue 33: litegate's writers (core, queue, Django) and plain sqlite3's under
# Litestream (file:// replica) and beside a long reader; restores checked for
# every acknowledged write (~5 minutes).
bench-replication: $(STAMP) $(LITESTREAM)
	$(VENV)/bin/litegate bench replication --runs 3 --seconds 10 --out results/replication

clean:
	rm -rf $(VENV) site .tools .venv-django42 .venv-django6 .venv-py310 .venv-py312 .venv-py313 $(SQLA20) .mypy_cache .pytest_cache .ruff_cache .cache
