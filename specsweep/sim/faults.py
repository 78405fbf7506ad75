"""Request-time faults: 5xx bursts, dropped streams, flapping health, a crash after N requests.

Startup faults (crash, hang, port in use) live in the launcher; these are the ones a
running server shows to its clients, decided here by a small deterministic object so
that every run with the same knobs and seed fails the same requests.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from specsweep.sim.knobs import SimKnobs

_ERROR_TYPES = {500: "InternalServerError", 503: "ServiceUnavailableError"}
_ERROR_TEXT = {
    500: "Internal server error: simulated fault (SPECSWEEP_SIM_ERROR_EVERY/_RATE)",
    503: "Service unavailable: simulated fault (SPECSWEEP_SIM_ERROR_EVERY/_RATE)",
}


class Faults:
    """Decides, request by request, what a faulty server does."""

    def __init__(self, knobs: SimKnobs, seed: int, on_crash: Callable[[], None]) -> None:
        self.knobs = knobs
        self._rng = random.Random(seed ^ 0x5EED)
        self._on_crash = on_crash
        self.requests = 0  # generation requests received
        self.completed = 0  # generation requests finished
        self.health_calls = 0  # /health answers after ready
        self.streams = 0  # streamed generations started
        self.crash_pending = False

    def error_status(self) -> int | None:
        """Count one generation request; the status to fail it with, or None."""
        self.requests += 1
        k = self.knobs
        if k.error_every and self.requests % k.error_every == 0:
            return k.error_status
        if k.error_rate and self._rng.random() < k.error_rate:
            return k.error_status
        return None

    def drop_stream(self) -> bool:
        """Count one streamed generation; whether to cut it after its first chunk."""
        self.streams += 1
        k = self.knobs.drop_every
        return bool(k) and self.streams % k == 0

    def request_done(self) -> None:
        """Count one completed generation; the N-th fires the configured crash."""
        self.completed += 1
        n = self.knobs.crash_after_requests
        if n is not None and self.completed >= n and not self.crash_pending:
            self.crash_pending = True
            self._on_crash()

    def health_ok(self) -> bool:
        """Whether this /health (after ready) answers 200: N up, N down with a flap."""
        flap = self.knobs.health_flap
        self.health_calls += 1
        return not flap or ((self.health_calls - 1) // flap) % 2 == 0


def error_body(status: int, openai: bool) -> dict[str, object]:
    """sglang's error JSON: ``{"error": {"message"}}`` natively, ErrorResponse on /v1."""
    message = _ERROR_TEXT.get(status, "error")
    if not openai:
        return {"error": {"message": message}}
    kind = _ERROR_TYPES.get(status, "InternalServerError")
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}
