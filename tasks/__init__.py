"""Prefect tasks: thin wrappers that add retries, logging and artifacts to engine steps."""
