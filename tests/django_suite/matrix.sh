#!/usr/bin/env bash
# make test-django-matrix: Django's own suite (issue 8's labels) on the other
# supported Django versions, each in a venv of its own: Django 4.2 LTS on
# python3 (3.11) and Django 6.x on Python 3.13; then the backend's own tests
# (tests/litegate/django) on each. litegate comes from src/.
set -euo pipefail
cd "$(dirname "$0")/../.."

find_python() {  # the first of "$@" that runs (pyenv shims may need a version)
    for p in "$@"; do
        if "$p" -c "" 2>/dev/null; then echo "$p"; return 0; fi
    done
    if command -v pyenv >/dev/null; then
        local v
        v=$(pyenv versions --bare 2>/dev/null | grep -E "^${1#python}(\.|$)" | tail -1 || true)
        if [ -n "$v" ] && PYENV_VERSION="$v" "$1" -c "" 2>/dev/null; then
            echo "env PYENV_VERSION=$v $1"; return 0
        fi
    fi
    return 1
}

run_leg() {  # name, python, Django requirement
    local name=$1 python=$2 req=$3 venv=.venv-$1
    if [ ! -x "$venv/bin/python" ]; then
        $python -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "$req"
    fi
    # the backend's own tests too (tasks backend, gunicorn --preload, processes)
    "$venv/bin/python" -m pip install --quiet pytest pytest-timeout "gunicorn>=22" "django-tasks>=0.9" \
        "hypothesis>=6"
    echo "== $name: $("$venv/bin/python" -c 'import sys, django; print("Django", django.get_version(), "on Python", sys.version.split()[0])')"
    "$venv/bin/python" tests/django_suite/run.py
    # (src and the lab: the tasks tests use the lab's task functions)
    PYTHONPATH=src:lab/src "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/litegate/django
}

status=0
run_leg django42 python3 "Django>=4.2,<4.3" || status=1
if py313=$(find_python python3.13); then
    run_leg django6 "$py313" "Django>=6.0" || status=1
else
    echo "== django6: skipped: no python3.13 found (Django 6 needs Python >= 3.12); install it and run again" >&2
    status=1
fi
exit $status
