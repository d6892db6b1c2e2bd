"""Benchmarks, each run side by side with a reference; see bench/README.md."""
