"""Parts a test needs from the machine: an OpenSSH server, Chromium, SGLang's own clients,
user namespaces.

On a developer's machine a missing part skips the test with how to get it. CI sets
``SPECSWEEP_REQUIRE_ALL=1`` (or a part's own ``SPECSWEEP_REQUIRE_<PART>=1``), and the same
test fails instead: nothing skips silently where everything must run.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def required(part: str) -> bool:
    names = (f"SPECSWEEP_REQUIRE_{part}", "SPECSWEEP_REQUIRE_ALL")
    return any(_truthy(os.environ.get(name)) for name in names)


def missing(part: str, reason: str) -> NoReturn:
    """Skip for want of `part`, or fail where it is required."""
    if required(part):
        pytest.fail(f"{reason} (SPECSWEEP_REQUIRE_{part}: this test must run here)", pytrace=False)
    pytest.skip(reason)
