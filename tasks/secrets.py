"""Secrets from Prefect Secret blocks: `secret:NAME` env values, SSH keys, passphrases.

The engine never imports Prefect; importing this module (tasks/server.py does)
tells it how to turn a block name into the secret's value.
"""

from __future__ import annotations

from prefect.blocks.system import Secret

from specsweep.secrets import set_secret_resolver


def read_secret(name: str) -> str:
    value = Secret.load(name).get()
    if not isinstance(value, str):
        raise TypeError(f"Prefect Secret {name!r} must hold a string, not {type(value).__name__}")
    return value


set_secret_resolver(read_secret)
