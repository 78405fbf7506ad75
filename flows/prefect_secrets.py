"""Secrets from Prefect Secret blocks: `secret:NAME` env values, SSH keys, passphrases.

The engine never imports Prefect (specsweep/config/secrets.py); every Prefect entry
point that may launch a server or open an SSH connection (the variant flows, their
cancellation hooks, the fleet commands and workers) calls `use_prefect_secrets()`
first, which tells the engine how to turn a block name into the secret's value.
"""

from __future__ import annotations

from prefect.blocks.system import Secret

from specsweep.config.secrets import set_secret_resolver


def read_secret(name: str) -> str:
    value = Secret.load(name).get()
    if not isinstance(value, str):
        raise TypeError(f"Prefect Secret {name!r} must hold a string, not {type(value).__name__}")
    return value


def use_prefect_secrets() -> None:
    """Resolve `secret:NAME` references through this process's Prefect API from now on."""
    set_secret_resolver(read_secret)
