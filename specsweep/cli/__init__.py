"""The `specsweep` command line: thin adapters over config loading, the flows and the answer."""

from specsweep.cli.main import app

__all__ = ["app"]
