"""Keep secrets (HF tokens, API keys) out of logs and results."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API[_-]?KEY|PRIVATE|CREDENTIAL", re.I)
# Flags end in the secret's kind; "--max-total-tokens" or "--tokenizer-path" are not secrets.
_SECRET_FLAG = re.compile(r"(token|secret|password|passwd|api[-_]?key|credentials?)$", re.I)
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with the values of secret-looking variables replaced."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_args(args: Sequence[str]) -> list[str]:
    """Argv with the values of secret-looking flags hidden (``--api-key sk-...``)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = arg.partition("=")
        if arg.startswith("--") and _SECRET_FLAG.search(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
                continue
            hide_next = True
        out.append(arg)
    return out
