#!/usr/bin/env bash
# ctest python.package: `pip install ./python` into a fresh virtual environment (from the
# build ctest runs in, nothing compiled again), then, from outside the source tree so that
# the installed copy is what gets imported: mypy --strict over the installed package (its
# hints and py.typed), and the pytest suite (tiny fixture model and SmolLM2).
#   TANDEM_SOURCE_DIR TANDEM_BUILD_DIR TANDEM_FIXTURE_TOOL TANDEM_PYTHON   (set by ctest)
# pytest, mypy and scikit-build-core come from scripts/setup.sh; a missing one fails the
# test (exit 1) unless TANDEM_ALLOW_SKIP=1 makes it a skip (77), as for missing models.
set -euo pipefail
: "${TANDEM_SOURCE_DIR:?}" "${TANDEM_BUILD_DIR:?}" "${TANDEM_FIXTURE_TOOL:?}"
PY=${TANDEM_PYTHON:-python3}

for mod in pytest mypy scikit_build_core; do
  if ! "$PY" -c "import $mod" 2>/dev/null; then
    if [ "${TANDEM_ALLOW_SKIP:-0}" = "1" ]; then
      echo "SKIPPED: the Python module '$mod' is missing (scripts/setup.sh installs it); TANDEM_ALLOW_SKIP=1"
      exit 77
    fi
    echo "FAILED: the Python module '$mod' is missing: run scripts/setup.sh (or set TANDEM_ALLOW_SKIP=1)" >&2
    exit 1
  fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-python-package-XXXXXX")
trap 'rm -rf "$work"' EXIT
# --system-site-packages: pytest, mypy and scikit-build-core from the interpreter setup.sh
# provisioned; --no-build-isolation: so the install needs no network.
"$PY" -m venv --system-site-packages "$work/venv"
venv_py="$work/venv/bin/python"
TANDEM_BUILD_DIR="$TANDEM_BUILD_DIR" "$venv_py" -m pip install -q --disable-pip-version-check --no-build-isolation \
  --no-deps "$TANDEM_SOURCE_DIR/python" >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; exit 1; }

cd "$work"
unset TANDEM_LIBRARY TANDEM_CLI PYTHONPATH  # only what the wheel carries
"$venv_py" - "$work" <<'PY'
import sys, tandem
assert tandem.__file__.startswith(sys.argv[1]), f"imported {tandem.__file__}, not the installed package"
print(f"tandem {tandem.__version__} from {tandem.__file__}")
PY
"$venv_py" -m mypy --strict --no-incremental -p tandem
# The tests' deliberate misuses carry `type: ignore[...]`: with warn_unused_ignores, mypy
# fails if the package's hints stopped rejecting them.
"$venv_py" -m mypy --no-incremental --warn-unused-ignores --allow-untyped-defs --ignore-missing-imports \
  "$TANDEM_SOURCE_DIR/python/tests/test_tiny.py"
"$venv_py" -m pytest -q -p no:cacheprovider --rootdir "$TANDEM_SOURCE_DIR/python" "$TANDEM_SOURCE_DIR/python/tests"
