"""Keep secrets (HF tokens, API keys) out of logs and results.

One rule decides which environment variables and which flags hold a secret (their values
are shown as ``***``), by name:

- the name's last word is a secret word: ``TOKEN``, ``KEY``, ``SECRET``, ``PASSWORD``,
  ``PASSWD``, ``PASS``, ``APIKEY``, ``CREDENTIAL`` or ``CREDENTIALS`` (and the plurals
  ``KEYS``, ``SECRETS``, ``PASSWORDS``, but not ``TOKENS``, which counts tokens), or the
  name is one of them. Words are separated by ``_``, ``-`` or ``.``, and case does not
  matter: ``HF_TOKEN``, ``MY_API_KEY``, ``DB_PASS``, ``--api-key``, ``--hf-token`` hold
  secrets;
- or the name is a known secret that does not end in such a word (KNOWN_SECRETS:
  ``AWS_ACCESS_KEY_ID``, ``PGPASSWORD``, ...).

Everything else is shown, so a knob that only mentions a secret word is read as it is:
``X_TOKEN_FACTOR=0.5``, ``SGLANG_MAX_TOKENS=4096`` (``TOKENS`` counts tokens),
``TOKENIZERS_PARALLELISM``, ``HF_TOKEN_PATH`` (where a token is, not the token),
``--max-total-tokens``, ``--tokenizer-path``.

``PASS`` counts (``DB_PASS``, ``SMTP_PASS`` are passwords far more often than a knob
ends in PASS): a value wrongly hidden costs a reader a number, a value wrongly shown
leaks a password. A secret under a name no rule knows is shown; keep it out of the
configuration with a ``secret:NAME`` reference (config/secrets.py), which is never
resolved before the launch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "KEY",
        "KEYS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
    }
)
# Secrets whose names end in another word (a key's id, a libpq or MySQL password, an
# auth string); those that end in a secret word (HF_TOKEN, OPENAI_API_KEY,
# AWS_SECRET_ACCESS_KEY, HUGGING_FACE_HUB_TOKEN, ...) need no entry.
KNOWN_SECRETS = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "PGPASSWORD",
        "MYSQL_PWD",
        "PREFECT_API_AUTH_STRING",
    }
)
_WORD_BREAK = re.compile(r"[_.\-]+")
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """Whether an env variable or a flag (``--api-key``) holds a secret, by the module's
    rule: its last word is a secret word, or it is a known secret name."""
    words = [w for w in _WORD_BREAK.split(name.strip().upper()) if w]
    return bool(words) and (words[-1] in SECRET_WORDS or "_".join(words) in KNOWN_SECRETS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with the values of secret variables replaced."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_args(args: Sequence[str]) -> list[str]:
    """Argv with the values of secret flags hidden (``--api-key sk-...``)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, eq, _ = arg.partition("=")
        if arg.startswith("--") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
                continue
            hide_next = True
        out.append(arg)
    return out
