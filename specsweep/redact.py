"""Keep secrets (HF tokens, API keys) out of logs and results."""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE|CREDENTIAL", re.I)
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with the values of secret-looking variables replaced."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}
