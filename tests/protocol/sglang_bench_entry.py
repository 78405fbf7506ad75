"""Run sglang's own benchmark client (``sglang.benchmark.serving``) without torch.

Executed with the reference environment's interpreter, never imported by the test
suite::

    .refclients/sglang/bin/python tests/protocol/sglang_bench_entry.py python ARGS
    .refclients/sglang/bin/python tests/protocol/sglang_bench_entry.py rust ARGS

``python`` takes exactly the arguments of ``python -m sglang.bench_serving`` (the
asyncio client), ``rust`` those of ``python -m sglang.benchmark.rust_client`` (the
Rust port bundled in the same wheel as ``sglang/srt/rust_extensions/_bench``).

Why a launcher: ``sglang/__init__.py`` and ``sglang/srt/utils/__init__.py`` import
torch and triton (server-side code), and ``sglang.benchmark.serving`` imports two
names from server modules: ``FAKE_BOOTSTRAP_HOST`` (a string constant, only used by
``--fake-prefill``) from ``sglang.srt.disaggregation.utils`` (torch), and
``resolve_base_url``/``resolve_host_port`` from ``sglang.srt.utils.network``
(psutil + pyzmq only). So this launcher registers the ``sglang``, ``sglang.srt``,
``sglang.srt.utils`` and ``sglang.srt.disaggregation`` packages without running
their ``__init__`` files, loads ``sglang/srt/utils/network.py`` itself from the
installed package, reads the constant out of the installed
``disaggregation/utils.py`` source, and then runs ``sglang.benchmark.serving`` as
``__main__``. Every line of the client that sends requests, times chunks and
computes metrics is the installed package's own code, unmodified.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import runpy
import sys
import types
from pathlib import Path


def _package(name: str, path: Path) -> types.ModuleType:
    """Register a package whose submodules load from ``path``, skipping its __init__."""
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    module.__package__ = name
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _constant(source: Path, name: str) -> object:
    """A module-level literal assigned in ``source`` (read, not executed)."""
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise LookupError(f"{name} not found in {source}")


def install_light_sglang() -> Path:
    """Make ``import sglang.benchmark.serving`` work without torch; return the package dir."""
    if "sglang.srt.disaggregation.utils" in sys.modules:
        return Path(sys.modules["sglang"].__path__[0])
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed in this interpreter's environment")
    root = Path(next(iter(spec.submodule_search_locations)))
    _package("sglang", root)
    _package("sglang.srt", root / "srt")
    _package("sglang.srt.utils", root / "srt" / "utils")
    _package("sglang.srt.disaggregation", root / "srt" / "disaggregation")
    disagg_utils = types.ModuleType("sglang.srt.disaggregation.utils")
    disagg_utils.FAKE_BOOTSTRAP_HOST = _constant(  # type: ignore[attr-defined]
        root / "srt" / "disaggregation" / "utils.py", "FAKE_BOOTSTRAP_HOST"
    )
    sys.modules[disagg_utils.__name__] = disagg_utils
    sys.modules["sglang.srt.disaggregation"].utils = disagg_utils  # type: ignore[attr-defined]
    return root


def run_python_client(argv: list[str]) -> int:
    """``python -m sglang.benchmark.serving ARGV`` (the asyncio client)."""
    install_light_sglang()
    sys.argv = ["sglang.benchmark.serving", *argv]
    runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
    return 0


def run_rust_client(argv: list[str]) -> int:
    """``python -m sglang.benchmark.rust_client ARGV`` (the bundled Rust client).

    ``sglang.srt.rust_extensions.load_rust_extension`` would import sglang's
    environment registry (torch again); the wheel bundles the compiled
    ``_bench`` module, so it is imported directly and handed to the package's
    own ``rust_client.main``, exactly as that function's ``extension`` argument
    allows.
    """
    root = install_light_sglang()
    _package("sglang.srt.rust_extensions", root / "srt" / "rust_extensions")
    extension = importlib.import_module("sglang.srt.rust_extensions._bench")
    from sglang.benchmark import rust_client

    return rust_client.main(["sglang.benchmark.rust_client", *argv], extension=extension)


CLIENTS = {"python": run_python_client, "rust": run_rust_client}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in CLIENTS:
        sys.stderr.write(f"usage: {sys.argv[0]} {{{'|'.join(CLIENTS)}}} [client args...]\n")
        return 2
    # Never reach out to a model hub: the tokenizer is a local directory.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return CLIENTS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
