"""Which sglang a target has, when its package metadata is missing (issue 29, item 1).

An sglang run from a source tree on PYTHONPATH, or copied into an image without its
dist-info, has no metadata: the probe falls back to the package's own __version__, a
version stated in the config is used without asking, and each message names the real
cause. Fake sglang packages on PYTHONPATH stand in; the probe runs in a real interpreter.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from specsweep.config import ServerSpec, Variant
from specsweep.config.file import parse_config
from specsweep.config.versions import SglangVersion
from specsweep.errors import ConfigError, UnsupportedByVersion
from specsweep.pipeline import check_target_version
from specsweep.results.rows import RunContext
from specsweep.results.runs import run_row
from specsweep.results.schema import RUNS_SCHEMA
from specsweep.targets.local import LocalHost
from tests.conftest import sim_config_data

ADAPTIVE = Variant(algorithm="EAGLE3", draft_model_path="d", adaptive=True)


def fake_sglang(root: Path, files: dict[str, str]) -> Path:
    """A package `sglang` under root, with no dist-info beside it (no metadata)."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).write_text(text)
    return root


def server(path: Path | None, **kw) -> ServerSpec:
    env = {"PYTHONPATH": str(path)} if path else {}
    return ServerSpec(model_path="m", python=sys.executable, env=env, **kw)


def ask(spec: ServerSpec, tmp_path: Path) -> SglangVersion:
    return LocalHost(tmp_path / "work").sglang_version(spec)


def test_a_source_tree_without_metadata_answers_with_sglang_version(tmp_path):
    root = fake_sglang(tmp_path / "src", {"version.py": '__version__ = "0.5.23"\n'})
    assert ask(server(root), tmp_path) == SglangVersion("0.5.23", "sglang.version.__version__")


def test_without_a_version_module_the_package_attribute_answers(tmp_path):
    root = fake_sglang(tmp_path / "src", {"__init__.py": '__version__ = "0.5.11"\n'})
    assert ask(server(root), tmp_path) == SglangVersion("0.5.11", "sglang.__version__")


def test_an_sglang_that_cannot_say_sends_the_user_to_server_sglang_version(tmp_path):
    root = fake_sglang(tmp_path / "src", {"version.py": "raise ImportError('no _version')\n"})
    with pytest.raises(ConfigError) as exc:
        ask(server(root), tmp_path)
    text = str(exc.value)
    assert "sglang has no package metadata and no readable version" in text
    assert "ImportError: no _version" in text
    assert text.endswith("state the version it runs as server.sglang_version")
    assert "check server.python" not in text  # the interpreter is right; sglang cannot say


def test_no_sglang_at_all_still_points_at_server_python(tmp_path):
    with pytest.raises(ConfigError, match=r"no module named sglang; check server\.python"):
        ask(server(tmp_path / "empty"), tmp_path)


def config_with(tmp_path: Path, **server_keys):
    data = sim_config_data(tmp_path, 31000, step_sweep=None)
    data["server"] = {"backend": "sglang", "model_path": "m", **server_keys}
    data["variants"] = [ADAPTIVE.model_dump(exclude_defaults=True)]
    return parse_config(data)


def test_a_stated_version_is_used_without_asking(tmp_path):
    # an interpreter that does not exist: asking would fail, so it was not asked
    config = config_with(tmp_path, python=str(tmp_path / "nope"), sglang_version="0.5.23")
    assert check_target_version(config, [ADAPTIVE]) == SglangVersion("0.5.23", "config")
    old = config_with(tmp_path, python=str(tmp_path / "nope"), sglang_version="0.5.9")
    with pytest.raises(UnsupportedByVersion, match=r"\(version from server\.sglang_version\) "
                       r"has sglang 0\.5\.9"):  # fmt: skip
        check_target_version(old, [ADAPTIVE])


def test_a_source_trees_placeholder_version_is_not_gated_on(tmp_path):
    """sglang's version.py says 0.0.0.dev0 when it cannot describe its tree: unknown, not
    "upgrade from 0.0.0"."""
    root = fake_sglang(tmp_path / "src", {"version.py": '__version__ = "0.0.0.dev0"\n'})
    config = config_with(tmp_path, python=sys.executable, env={"PYTHONPATH": str(root)})
    with pytest.raises(UnsupportedByVersion, match="cannot tell which sglang it has") as exc:
        check_target_version(config, [ADAPTIVE])
    assert "server.sglang_version" in str(exc.value)
    with pytest.raises(ValueError, match="is not an sglang version"):
        ServerSpec(model_path="m", sglang_version="0.0.0.dev0")


def test_the_runs_row_says_which_source_the_version_came_from(tmp_path):
    config = config_with(tmp_path, sglang_version="0.5.23")
    ctx = RunContext("20261101T020000Z-abcdef", "matrix_sweep", "t", "h")
    started = datetime(2026, 11, 1, tzinfo=UTC)
    version = SglangVersion("0.5.23", "sglang.version.__version__")
    row = run_row(config, ctx, [ADAPTIVE], {}, started, sglang=version)
    assert (row["sglang_version"], row["sglang_version_source"]) == (
        "0.5.23",
        "sglang.version.__version__",
    )
    assert {"sglang_version", "sglang_version_source"} <= set(RUNS_SCHEMA.names)
    plain = run_row(config, ctx, [ADAPTIVE], {}, started)  # no gate asked: nothing claimed
    assert plain["sglang_version"] is None and plain["sglang_version_source"] is None
