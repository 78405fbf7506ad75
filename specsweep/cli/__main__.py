"""`python -m specsweep.cli ...`, the same as the `specsweep` command."""

from specsweep.cli.main import app

app()
