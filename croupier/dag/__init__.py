"""Multi-stage jobs: the low-level job API (stages, operators, exchanges) and its DAG runner."""
