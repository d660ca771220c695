"""Benchmarks for hpo (not part of the installed package); run them from the repository root."""
