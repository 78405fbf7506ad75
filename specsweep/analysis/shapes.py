"""The answer over load shapes: which shapes a run measured, in its order, and the surface
(best variant and its speedup at every shape x concurrency) that one picture shows.

A shape's cells are answered on their own (best, pivot, policy, export): speculation's
break-even moves with context length, so a verdict across shapes would average two
different servers' answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

from specsweep.config.load import shape_label

_LABEL = re.compile(r"^in(\d+)-out(\d+)$")

SURFACE_COLUMNS = [
    "shape", "input_len", "output_len", "concurrency", "best_variant", "choice",
    "best_throughput", "speedup", "speedup_lo", "speedup_hi", "near_tie",
]  # fmt: skip

# The requests columns category_table reads (the rest of a request row is not loaded).
CATEGORY_INPUTS = [
    "variant", "concurrency", "shape", "category", "error", "tpot_ms", "spec_accept_length",
    "chunk_tokens",
]  # fmt: skip

CATEGORY_COLUMNS = [
    "shape", "variant", "category", "requests", "accept_length", "decode_tok_s", "concurrency",
]  # fmt: skip


def shape_lengths(label: str) -> tuple[int, int]:
    """(input_len, output_len) of a label such as in4096-out256 ((0, 0) if not one)."""
    m = _LABEL.match(str(label))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def shape_order(levels: pd.DataFrame, run: dict[str, Any] | None = None) -> list[str]:
    """The run's shapes: in its config's order, then any others by input, output length."""
    if levels.empty or "shape" not in levels.columns:
        return []
    present = [str(s) for s in levels["shape"].dropna().unique()]
    listed: list[str] = []
    text = (run or {}).get("config")
    if text:
        for s in (json.loads(text).get("load") or {}).get("shapes") or []:
            listed.append(shape_label(s["input_len"], s["output_len"]))
    order = [s for s in listed if s in present]
    rest = sorted(set(present) - set(order), key=shape_lengths)
    return order + rest


def surface_table(best_by_shape: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (shape, concurrency): the best variant, the choice (the simplest of those
    tied with it) and its speedup over the baseline with the 95% interval."""
    frames = []
    for shape, best in best_by_shape.items():
        if best.empty:
            continue
        ins, outs = shape_lengths(shape)
        keep = [c for c in SURFACE_COLUMNS if c not in ("shape", "input_len", "output_len")]
        frame = best.reindex(columns=keep).assign(shape=shape, input_len=ins, output_len=outs)
        frames.append(frame[SURFACE_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=SURFACE_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def verify_caps(levels: pd.DataFrame) -> dict[str, int]:
    """Speculative variant -> the most tokens one verify pass emits (its draft tokens), for
    the variants whose streamed chunks are one verify pass each (no ``--stream-interval``
    above 1 in the server command): what `category_table` may read acceptance from."""
    need = {"variant", "is_baseline", "num_draft_tokens", "server_command"}
    if levels.empty or not need <= set(levels.columns):
        return {}
    caps = {}
    for variant, g in levels[~levels["is_baseline"].astype(bool)].groupby("variant"):
        tokens = g["num_draft_tokens"].dropna()
        command = (
            str(g["server_command"].dropna().iloc[0]) if g["server_command"].notna().any() else ""
        )
        interval = re.search(r"--stream-interval[ =](\d+)", command)
        if len(tokens) and (interval is None or int(interval.group(1)) == 1):
            caps[str(variant)] = int(tokens.iloc[0])
    return caps


def _chunk_accept(chunks: Any, cap: int) -> float:
    """Tokens per verify pass from a request's streamed chunks (one pass per chunk): the
    chunks between the first (the prefill's token) and the last (cut at max_tokens);
    NaN when there are none or a chunk holds more than one pass can emit (`cap`)."""
    if chunks is None or len(chunks) < 3:
        return np.nan
    middle = [int(n) for n in list(chunks)[1:-1]]
    if not middle or max(middle) > cap or min(middle) < 1:
        return np.nan
    return float(np.mean(middle))


def category_table(
    requests: pd.DataFrame, verify_caps: dict[str, int] | None = None
) -> pd.DataFrame:
    """Per shape, variant and prompt category: requests, the mean accept length (tokens per
    verify pass, over all the variant's measured requests) and the median per-stream decode
    speed at the variant's lowest level (where a stream's speed is speculation's gain, not
    the batch's). Empty when no request carries a category.

    The accept length is the server's (``meta_info.spec_accept_length``, on ``/generate``);
    OpenAI endpoints carry none, so for the variants in `verify_caps` (each streamed chunk
    one verify pass, see `verify_caps`) it is read from the request's chunks instead."""
    if requests.empty or "category" not in requests.columns:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    rows = requests[requests["category"].notna() & requests["error"].isna()]
    if rows.empty:
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    rows = rows.assign(
        shape=rows["shape"].fillna(""),
        decode=1000.0 / rows["tpot_ms"].where(rows["tpot_ms"] > 0),
    )
    caps = verify_caps or {}
    out = []
    for (shape, variant, category), g in rows.groupby(["shape", "variant", "category"]):
        low = g[g["concurrency"] == g["concurrency"].min()]
        accept = g["spec_accept_length"]
        if variant in caps and "chunk_tokens" in g.columns and accept.isna().all():
            accept = g["chunk_tokens"].map(lambda ch, cap=caps[variant]: _chunk_accept(ch, cap))
        accept = accept.dropna()
        out.append(
            {
                "shape": shape or None,
                "variant": variant,
                "category": category,
                "requests": len(g),
                "accept_length": float(accept.mean()) if len(accept) else np.nan,
                "decode_tok_s": float(low["decode"].median()),
                "concurrency": int(low["concurrency"].iloc[0]),
            }
        )
    return pd.DataFrame(out, columns=CATEGORY_COLUMNS)


def shape_rows(frame: pd.DataFrame | None, shape: str, first: bool) -> pd.DataFrame | None:
    """A shape's rows of a table with a `shape` column (null: written before shapes, which
    belongs to the first shape)."""
    if frame is None or frame.empty or "shape" not in frame.columns:
        return frame if first else None
    mine = frame["shape"] == shape
    if first:
        mine |= frame["shape"].isna()
    return frame[mine]
