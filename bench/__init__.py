"""Benchmarks and quality evaluation (`make bench`)."""
