"""Prefect flows: one per sweep kind, plus the per-variant subflow."""
