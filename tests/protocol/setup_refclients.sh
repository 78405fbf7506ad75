#!/usr/bin/env bash
# Install the independent reference load clients (SGLang's own benchmark clients)
# into their own virtualenv, .refclients/sglang/ (or $SPECSWEEP_REFCLIENTS_DIR/sglang),
# never into the project's .venv. Idempotent: a complete environment built from the
# same requirements file is left alone (pass --force to rebuild).
#
#   bash tests/protocol/setup_refclients.sh [--force]
#
# Needs Python 3.11 (the wheel's bundled Rust client is a CPython 3.11 extension;
# set PYTHON=... to choose the interpreter) and PyPI. No torch, no model hub.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
DIR="${SPECSWEEP_REFCLIENTS_DIR:-$PWD/.refclients}"
ENV="$DIR/sglang"
REQ="tests/protocol/refclients-requirements.txt"
STAMP="$ENV/.specsweep-complete"
WANT="requirements-sha256 $(sha256sum "$REQ" | cut -d' ' -f1)"

if [[ "${1:-}" != "--force" && -f "$STAMP" ]] && grep -qx "$WANT" "$STAMP"; then
    echo "reference clients up to date in $ENV ($(head -n1 "$STAMP"))"
    exit 0
fi

# uv (the project's own, from `make install`) takes seconds; pip a minute or two.
# UV=none forces pip.
UV="${UV:-}"
if [[ "$UV" == none ]]; then
    UV=""
elif [[ -z "$UV" && -x .tools/bin/uv ]]; then
    UV=.tools/bin/uv
elif [[ -z "$UV" ]] && command -v uv >/dev/null; then
    UV="$(command -v uv)"
fi

start=$(date +%s)
rm -rf "$ENV"
mkdir -p "$DIR"
if [[ -n "$UV" ]]; then
    "$PYTHON" -m venv --without-pip "$ENV"
    "$UV" pip install --quiet --python "$ENV/bin/python" --no-deps --only-binary :all: \
        --compile-bytecode -r "$REQ"
else
    "$PYTHON" -m venv "$ENV"
    # (this machine's pip.conf names local indexes that may be absent: drop that noise)
    "$ENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --no-deps --only-binary=:all: -r "$REQ" 2> >(grep -v "is ignored: it is neither" >&2)
fi
version="$("$ENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')"
"$ENV/bin/python" tests/protocol/sglang_bench_entry.py python --help >/dev/null 2>&1 \
    || { echo "sglang.benchmark.serving does not start in $ENV" >&2; \
         "$ENV/bin/python" tests/protocol/sglang_bench_entry.py python --help 2>&1 | tail -20 >&2; exit 1; }
"$ENV/bin/python" tests/protocol/sglang_bench_entry.py rust --help >/dev/null 2>&1 \
    || { echo "sglang's Rust benchmark client does not start in $ENV" >&2; exit 1; }
printf 'sglang %s\n%s\n' "$version" "$WANT" > "$STAMP"
echo "reference clients installed in $ENV: sglang $version, $(du -sh "$ENV" | cut -f1)," \
    "$(( $(date +%s) - start )) s"
