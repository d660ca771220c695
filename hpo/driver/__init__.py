"""The driver: runs an experiment (fresh or resumed) on an embedded or a connected Ray.

    run/       one run from Spec to result: runner, translate (Spec -> Tune), preflight,
               the user's trainable, the outcome, a run inside an allocation
    backends/  where a run's Ray comes from: embedded, kept, the user's own, warm local, a
               Slurm node's start
    guards/    what keeps the work whole: stops, history, lease, storage faults, walltime,
               the snapshot's copy and deletes
    plugins/   Tune plug-ins: progress, trial logs, tracking, warm start, best checkpoint, RASDA
Every reach below Ray's public API is in hpo.ray_adapters, not here.
"""
