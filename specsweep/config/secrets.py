"""Secrets by reference: the configuration names a secret, the value is fetched at use.

A value of the form ``secret:NAME`` in ``server.env`` / a variant's ``env`` (and the
SSH target's ``key_secret`` / ``passphrase_secret``) is the name of a secret in the
orchestrator's secret store, by default Prefect Secret blocks (flows/prefect_secrets.py plugs
them in; the engine never imports Prefect). Only the reference is stored in flow-run
parameters, logs and results; the value exists only in the launched server's
environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from specsweep.errors import ConfigError

SecretResolver = Callable[[str], str]
PREFIX = "secret:"
_resolver: SecretResolver | None = None


def set_secret_resolver(resolver: SecretResolver | None) -> None:
    global _resolver
    _resolver = resolver


def is_reference(value: str) -> bool:
    return value.startswith(PREFIX)


def resolve(name: str, what: str) -> str:
    if _resolver is None:
        raise ConfigError(
            f"{what} names a secret ({name!r}) that only the Prefect flows can read: run "
            "through specsweep's flows or CLI, or give the value another way"
        )
    try:
        return _resolver(name)
    except (ValueError, TypeError, KeyError) as exc:  # no such secret, or not a string
        raise ConfigError(f"{what}: secret {name!r} could not be read: {exc}") from None


def resolve_env(env: Mapping[str, str], what: str = "env") -> dict[str, str]:
    """The environment with every ``secret:NAME`` value replaced by the secret."""
    return {
        k: resolve(v[len(PREFIX) :], f"{what}.{k}") if is_reference(v) else v
        for k, v in env.items()
    }


def literal_secret_names(envs: Iterable[Mapping[str, str]]) -> list[str]:
    """Secret-looking variables given as plain values, which the run's stored parameters
    (Prefect keeps a flow run's config) would hold: better as ``secret:NAME``."""
    from specsweep.config.redact import is_secret_name

    return sorted(
        {k for env in envs for k, v in env.items() if is_secret_name(k) and not is_reference(v)}
    )
