"""Secret references resolve through the plugged-in store; failures name the secret."""

from __future__ import annotations

import pytest

from specsweep.config import secrets
from specsweep.errors import ConfigError


@pytest.fixture(autouse=True)
def _keep_the_plugged_in_store():
    """Put back whatever store was plugged in (the flows plug in Prefect's Secret blocks with
    `use_prefect_secrets()`): a later test in this process may read secrets through it."""
    previous = secrets._resolver
    yield
    secrets.set_secret_resolver(previous)


@pytest.fixture
def store():
    values = {"hf": "hf_abc"}

    def resolver(name: str) -> str:
        if name not in values:
            raise ValueError(f"Unable to find block document named {name}")
        return values[name]

    secrets.set_secret_resolver(resolver)
    return values


def test_references_resolve_and_plain_values_pass(store):
    env = secrets.resolve_env({"HF_TOKEN": "secret:hf", "A": "1"})
    assert env == {"HF_TOKEN": "hf_abc", "A": "1"}


def test_a_missing_secret_is_a_config_error_naming_where_it_was_used(store):
    with pytest.raises(ConfigError, match=r"target.key_secret: secret 'nope' could not be read"):
        secrets.resolve("nope", "target.key_secret")


def test_without_a_store_the_message_says_who_can_read_it():
    secrets.set_secret_resolver(None)
    with pytest.raises(ConfigError, match="only the Prefect flows can read"):
        secrets.resolve("hf", "server.env.HF_TOKEN")
