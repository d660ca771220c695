"""What runs inside a trial's processes, in one place.

The driver turns a spec into Tune objects (hpo.driver); everything Tune then runs on a worker
is here:
    session      the context a trainable sees: `hpo.report`, `hpo.get_checkpoint`, checkpoint
                 files in and out of Ray's storage
    cost         cpu/gpu hours and energy added to every report
    one_process  the Tune trainable of a one-process trial (`with_session`), and large objects
                 by reference (`objects_in_store`, `call_with_objects`, `class_with_objects`)
    ranks/       the Tune trainable of a data-parallel trial (`ranks.trial.distributed_trainable`,
                 `rank_placement`, `rank_count`): Horovod or DDP ranks, warm ranks
    dist         what a trainable calls to run the same on one process or many ranks
    large_batch  the large-batch recipe: global batch, LR rules, batch schedules, optimizers
    placement    a trial's process, or a rank, on the CPUs near its GPU (HPO_GPU_CORES)
The driver imports only the entry points named above. A trainable imports `hpo.dist` and
`hpo.large_batch` by those names (hpo/__init__.py).
"""
