"""What a reader must know before trusting a run's numbers, worded once for every view:
the CLI prints these, the report and the Prefect artifacts state them.

Each is read from the stored level rows, so a view written long after the run (a report
from Parquet) says the same as the terminal did when it ran.
"""

from __future__ import annotations

import json

import pandas as pd


def simulated_note(levels: pd.DataFrame) -> str | None:
    """Say plainly that simulated numbers are not a GPU's, and how time was scaled."""
    if levels.empty or "simulated" not in levels.columns or not levels["simulated"].any():
        return None
    envs = levels["env"] if "env" in levels.columns else pd.Series(dtype=object)
    scales = {json.loads(e or "{}").get("SPECSWEEP_SIM_TIME_SCALE", "1") for e in envs}
    note = "simulated server: these numbers come from specsweep's performance model, not a GPU"
    if scales - {"1", "1.0"}:
        scale = ", ".join(sorted(scales))
        note += (
            f"; SPECSWEEP_SIM_TIME_SCALE={scale} compresses simulated time, so throughputs are "
            "1/scale times and latencies scale times those of the modelled GPU"
        )
    return note


def queue_note(levels: pd.DataFrame) -> str | None:
    """Levels measured above the server's max_running_requests: their extra streams only
    queued (the before-launch check says the same of a config, workloads/preflight.py)."""
    if levels.empty or "max_running_requests" not in levels.columns:
        return None
    cap = pd.to_numeric(levels["max_running_requests"], errors="coerce")
    above = levels[cap.notna() & (levels["concurrency"] > cap)]
    if above.empty:
        return None
    caps = ", ".join(str(int(c)) for c in sorted(set(above["max_running_requests"])))
    at = ", ".join(str(int(c)) for c in sorted(set(above["concurrency"])))
    return (
        f"levels above max_running_requests {caps} (c={at}) measured the server's queue, not "
        "a larger batch: the extra requests waited (their TTFT grows, throughput does not)"
    )


def random_ids_note(levels: pd.DataFrame) -> str | None:
    """Speculative variants on a real sglang server fed random token ids: their acceptance,
    and so their speedups, are understated against real text."""
    needed = {"workload", "backend", "algorithm"}
    if levels.empty or not needed <= set(levels.columns):
        return None
    sglang = levels[levels["backend"] == "sglang"]
    speculative = sglang[sglang["algorithm"].notna()]
    if speculative.empty or not (speculative["workload"] == "random-ids").any():
        return None
    return (
        "the load sent random token ids: a drafter accepts far fewer tokens on them than on "
        "real text, so the speculative variants' accept length and speedups are understated"
    )


def sentence(note: str) -> str:
    """A note as a sentence of its own: capitalised, with its full stop. A note that starts
    with a name (``max_bs 256``, ``c=8: ...``, a variant) keeps its case."""
    first = note.split(maxsplit=1)[0] if note.strip() else ""
    head = note[0].upper() if first.rstrip(".,:;!?").isalpha() else note[:1]
    return f"{head}{note[1:]}{'' if note.endswith(('.', '!', '?')) else '.'}"


def level_notes(levels: pd.DataFrame) -> list[str]:
    """Every caveat the level rows carry, in the CLI's words (lower case, no full stop)."""
    notes = (simulated_note(levels), queue_note(levels), random_ids_note(levels))
    return [n for n in notes if n]
