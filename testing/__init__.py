"""What the tests and the benchmarks share, outside both: a real multi-node Slurm on this
machine (`testing.slurm_cluster`). Not part of the installed package; import it with the
repository root on sys.path (pytest's rootdir, or `python -m benchmarks` from the root)."""
