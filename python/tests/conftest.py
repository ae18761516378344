"""Fixtures of the Python package's tests.

The package under test is whatever `import tandem` finds: the installed wheel (ctest
python.package installs it into a fresh venv first), or python/src with TANDEM_LIBRARY
pointing at a build's libtandem.so for development.

Models: a tiny random-weight GGUF written by the repository's fixture tool
(tandem_make_fixture, $TANDEM_FIXTURE_TOOL or build/release's), and SmolLM2 under the
policy of the C++ model tests (tests/support/paths.hpp): skipped when outside the run's
model set (TANDEM_TEST_MODELS), failing when missing unless TANDEM_ALLOW_SKIP=1.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

import tandem

REPO = pathlib.Path(__file__).resolve().parents[2]


def _fixture_tool() -> str:
    tool = os.environ.get("TANDEM_FIXTURE_TOOL") or str(REPO / "build" / "release" / "tandem_make_fixture")
    if not os.path.exists(tool):
        pytest.fail(f"the fixture tool {tool} is missing: build it (cmake --build --preset release --target "
                    f"tandem_make_fixture) or set TANDEM_FIXTURE_TOOL")
    return tool


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny.gguf"
    subprocess.run([_fixture_tool(), str(path)], check=True)
    return str(path)


@pytest.fixture(scope="session")
def tiny(tiny_path: str) -> Iterator[tandem.Engine]:
    with tandem.Engine.load(tiny_path, threads=1, context=512) as e:
        yield e


def _model(key: str) -> str:
    manifest = json.loads((REPO / "scripts" / "models.json").read_text())["models"]
    model_set = os.environ.get("TANDEM_TEST_MODELS") or "all"
    keys = [k.strip() for k in model_set.split(",") if k.strip()] if model_set not in ("all", "none") else []
    unknown = [k for k in keys if k not in manifest]
    if unknown:
        pytest.fail(f"TANDEM_TEST_MODELS={model_set} names an unknown model '{unknown[0]}'")
    if model_set != "all" and key not in keys:
        pytest.skip(f"model '{key}' is not in this run's model set (TANDEM_TEST_MODELS={model_set})")
    root = os.environ.get("TANDEM_MODELS") or os.path.expanduser("~/.cache/tandem/models")
    path = os.path.join(root, manifest[key]["file"])
    if not os.path.exists(path):
        fetch = f"python3 scripts/fetch_models.py --models {key}"
        if os.environ.get("TANDEM_ALLOW_SKIP") == "1":
            pytest.skip(f"model '{key}' not downloaded ({path}); TANDEM_ALLOW_SKIP=1. To test it: {fetch}")
        pytest.fail(f"model '{key}' not downloaded ({path}). Run: {fetch} (or TANDEM_ALLOW_SKIP=1)")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    return _model("smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_path: str) -> Iterator[tandem.Engine]:
    with tandem.Engine.load(smollm2_path, threads=2) as e:
        yield e
