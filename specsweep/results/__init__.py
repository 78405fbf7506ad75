"""The Parquet results store: one schema, one module that owns every path."""
