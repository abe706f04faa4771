"""Benchmarks for chains; run each as a module from the repository root."""
