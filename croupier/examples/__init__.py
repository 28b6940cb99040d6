"""Worked examples in the lazy frame API (TPC-H and TPC-DS queries)."""
