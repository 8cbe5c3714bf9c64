"""Benchmarks (see bench/results/README.md). A package so scripts can run as ``python -m bench.NAME``."""
