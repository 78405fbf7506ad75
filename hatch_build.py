"""The build hook that installs flows/, tasks/ and deployments/ as specsweep.flows, ... .

The folders stay at the top of the repository; installed, they live under the specsweep
namespace so that they never shadow, nor are shadowed by, a user's own `flows` package.
A wheel copies them into specsweep/ (`force-include` in pyproject.toml). An editable
install cannot: hatchling's dev mode maps top-level names only (it refuses a `sources`
rewrite that adds a prefix, and the `editables` hook maps no dotted name), and adding the
checkout to sys.path would make `flows` itself importable. So `dev-mode-exact` maps
`specsweep` alone, and this hook adds a finder that maps the three subpackages to their
folders in the checkout: no path entry, nothing importable at the top level.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LAYERS = ("flows", "tasks", "deployments")

FINDER = '''\
"""specsweep's editable install: specsweep.{{flows,tasks,deployments}} from the checkout."""

import importlib.util
import sys

_LAYERS = {layers!r}


class SpecsweepLayerFinder:
    @staticmethod
    def find_spec(fullname, path=None, target=None):
        folder = _LAYERS.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder + "/__init__.py", submodule_search_locations=[folder]
        )

    @staticmethod
    def invalidate_caches():
        pass


if not any(getattr(f, "__name__", "") == "SpecsweepLayerFinder" for f in sys.meta_path):
    sys.meta_path.append(SpecsweepLayerFinder)
'''


class LayersHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version != "editable":
            return  # the wheel: force-include copies the folders into specsweep/
        layers = {f"specsweep.{name}": os.path.join(self.root, name) for name in LAYERS}
        out = self._scratch = tempfile.mkdtemp(prefix="specsweep-editable-")
        finder = os.path.join(out, "_specsweep_layers.py")
        pth = os.path.join(out, "_specsweep_layers.pth")
        with open(finder, "w") as f:
            f.write(FINDER.format(layers=layers))
        with open(pth, "w") as f:
            f.write("import _specsweep_layers\n")
        # Replaces the force-include map in dev mode: no copy of the folders is installed.
        build_data["force_include_editable"] = {
            finder: "_specsweep_layers.py",
            pth: "_specsweep_layers.pth",
        }

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)  # the wheel holds copies now
