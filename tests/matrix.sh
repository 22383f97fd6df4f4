#!/usr/bin/env bash
# make test-matrix: the product's unit tests (tests/litegate) on each
# supported Python other than the default one, each in a venv of its own
# (.venv-py310, .venv-py312, .venv-py313): litegate from src/ (editable) with
# the extras that install on that Python, plus the lab's code without its
# dependencies (the tests' throwaway PostgreSQL server and the tasks
# backend's test task live there). Usage: tests/matrix.sh [3.10 3.12 ...].
# Exits non-zero if a leg fails or its Python is missing.
set -uo pipefail
cd "$(dirname "$0")/.."

EXTRAS=(django sqlalchemy ops postgres)

find_python() {  # python3.X, through pyenv's shims where they need a version
    local p=python$1
    if "$p" -c "" 2>/dev/null; then echo "$p"; return 0; fi
    if command -v pyenv >/dev/null; then
        local v
        v=$(pyenv versions --bare 2>/dev/null | grep -E "^${1//./\\.}(\\.|$)" | tail -1 || true)
        if [ -n "$v" ] && PYENV_VERSION="$v" "$p" -c "" 2>/dev/null; then
            echo "env PYENV_VERSION=$v $p"; return 0
        fi
    fi
    return 1
}

setup() {  # venv, python: the venv with dev and every extra that installs
    local venv=$1 python=$2 stamp=$1/.installed
    if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt lab/pyproject.toml ]; then
        return 0
    fi
    $python -m venv "$venv" || return 1
    "$venv/bin/python" -m pip install --quiet --upgrade pip || return 1
    local all
    all=$(IFS=,; echo "dev,${EXTRAS[*]}")
    if ! "$venv/bin/python" -m pip install --quiet -e ".[$all]"; then
        echo "   not every extra installs here: dev, then each extra on its own" >&2
        "$venv/bin/python" -m pip install --quiet -e ".[dev]" || return 1
        for extra in "${EXTRAS[@]}"; do
            "$venv/bin/python" -m pip install --quiet -e ".[$extra]" \
                || echo "   the $extra extra does not install on this Python: its tests skip" >&2
        done
    fi
    "$venv/bin/python" -m pip install --quiet --no-deps -e lab || return 1
    touch "$stamp"
}

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.12 3.13)
status=0
summary=()
for v in "${versions[@]}"; do
    venv=.venv-py${v//./}
    if ! python=$(find_python "$v"); then
        echo "== Python $v: not found (python$v on PATH or through pyenv); install it and run again" >&2
        summary+=("Python $v: MISSING")
        status=1
        continue
    fi
    start=$SECONDS
    if ! setup "$venv" "$python"; then
        summary+=("Python $v: its venv could not be set up")
        status=1
        continue
    fi
    echo "== $("$venv/bin/python" -c 'import sys; print("Python", sys.version.split()[0])'): tests/litegate"
    log=$(mktemp)
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/litegate 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    [ "$code" -eq 0 ] || status=1
    summary+=("Python $v: $(grep -E '^=* ?[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=' | sed 's/^ *//') (exit $code, $((SECONDS - start)) s with setup)")
    rm -f "$log"
done
echo
printf '%s\n' "${summary[@]}"
exit $status
