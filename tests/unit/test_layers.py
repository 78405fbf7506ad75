"""The engine (specsweep/) must never import Prefect: tasks/ and flows/ adapt it."""

import pkgutil
import subprocess
import sys

import specsweep


def test_no_engine_module_imports_prefect():
    modules = [m.name for m in pkgutil.walk_packages(specsweep.__path__, "specsweep.")]
    modules = [m for m in modules if not m.endswith("__main__")]
    assert "specsweep.pipeline" in modules and "specsweep.sim.launch_server" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "leaked = sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.'))\n"
        "print(leaked[:5]); sys.exit(1 if leaked else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, f"engine imported Prefect: {proc.stdout}{proc.stderr}"
