"""The meanings docs/spec.md gives where a model's own comment says too little or nothing
(hpo.spec.reference reads the models' comments first; a key with neither fails it)."""

from __future__ import annotations

#: Meanings by YAML path, before the model's own comment (where it has one).
MEANINGS: dict[str, str] = {
    "name": "The experiment's folder: `<storage>/<name>`; also the default MLflow experiment "
            "and W&B project.",
    "trainable": "What each trial runs: `package.module:function`, `path/to/file.py:function` "
                 "(the path relative to the current folder, where `hpo` or the Python process "
                 "runs, not to the YAML file, unless it is absolute; a module is imported with "
                 "the current folder first on Python's path) or a Ray Tune Trainable class by "
                 "the same forms.",
    "metric": "The reported metric that ranks trials (a key of the dict passed to "
              "`hpo.report`).",
    "mode": "Whether a higher (`max`) or lower (`min`) metric is better; one per metric.",
    "num_samples": "Trials to run (with `grid` entries: samples, each crossed with the "
                   "whole grid).",
    "max_concurrent": "The most trials running at once; null: as many as the resources fit.",
    "search_space": "The hyperparameters to search, each a distribution (below); a trial "
                    "gets its drawn values in `config`.",
    "constants": "Fixed values merged into every trial's `config` (a key may not also be in "
                 "`search_space`).",
    "scheduler": "Which trials to stop early, pause or perturb (below).",
    "search": "How trials' configurations are drawn (below).",
    "resources": "What one trial takes (one-process trials).",
    "distributed": "Data-parallel trials on several ranks (below); null: one process per "
                   "trial.",
    "stop": "Stop a trial once a reported metric reaches a value, e.g. "
            "`{training_iteration: 20}`; each key must be in every result (a result without "
            "one ends the run, with a did-you-mean).",
    "time_budget_s": "Stop the whole experiment after this many seconds; null: no limit.",
    "checkpoint": "Which checkpoints hpo keeps (below).",
    "failure": "Retries of failed trials (below).",
    "storage": "The results root: the experiment folder is `<storage>/<name>`.",
    "slurm": "The allocation `hpo slurm render`/`submit` asks for (below).",
    "tracking": "Experiment trackers (below).",
    "scheduler.time_attr": "The time axis that `max_t`, `grace_period` and "
                           "`perturbation_interval` count: reports or seconds.",
    "scheduler.max_t": "A trial's last rung: the most iterations (or seconds) it runs.",
    "scheduler.grace_period": "Time a trial runs before it can be stopped.",
    "scheduler.reduction_factor": "One in this many trials is promoted at each rung.",
    "scheduler.brackets": "ASHA brackets; more brackets judge trials later.",
    "scheduler.stop_last_trials": "Stop the trials that reach `max_t` (false: they run on).",
    "scheduler.growth_factor": "A promoted trial's ranks are multiplied by this at each rung.",
    "scheduler.batch": "`fixed`: the global batch stays; `grows`: it grows with the ranks.",
    "scheduler.min_samples_required": "Trials that must have reported before one is judged.",
    "scheduler.min_time_slice": "The least time a trial runs each time it is scheduled.",
    "scheduler.hard_stop": "Stop a trial below the median (false: pause it).",
    "scheduler.perturbation_interval": "Time between perturbations (a multiple of "
                                       "`checkpoint.frequency`).",
    "scheduler.burn_in_period": "No perturbation before this time.",
    "scheduler.hyperparam_mutations": "The hyperparameters to perturb, each a distribution "
                                      "(below); PB2 needs `uniform`/`loguniform` bounds.",
    "scheduler.quantile_fraction": "The bottom fraction of trials that clone the top one.",
    "scheduler.resample_probability": "The chance that a perturbed value is drawn afresh "
                                      "from its distribution instead.",
    "scheduler.perturbation_factors": "A perturbed number is multiplied by one of these.",
    "scheduler.synch": "Perturb all trials together at each interval (slower; false: as "
                       "each reaches it).",
    "search.seed": "Seeds the sampler.",
    "search.sampler": "Optuna's sampler: TPE, or NSGA-II for several objectives.",
    "search.n_startup_trials": "TPE: random trials before the model proposes.",
    "search.multivariate": "TPE: model the hyperparameters jointly.",
    "resources.cpus_per_trial": "CPUs per trial.",
    "resources.gpus_per_trial": "GPUs per trial.",
    "distributed.backend": "The ranks' communication: Horovod or torch DDP.",
    "distributed.workers": "Ranks per trial (at its start, under `rasda`).",
    "distributed.cpus_per_worker": "CPUs per rank.",
    "distributed.gpus_per_worker": "GPUs per rank: 0 or whole GPUs.",
    "slurm.nodes": "Nodes of the job, one Ray node each.",
    "slurm.gpus_per_node": "GPUs asked for per node.",
    "slurm.time": "The job's time limit (Slurm's `--time`).",
    "slurm.partition": "Slurm partition; null: the site's or the cluster's default.",
    "slurm.account": "Slurm account to charge; null: your default.",
    "slurm.startup_timeout_s": "How long every node has to join Ray before the job fails, "
                               "naming those that did not.",
    "slurm.node_cpus": "CPUs one node has, as Slurm counts them.",
    "slurm.mem": "Memory per node (`--mem`).",
    "slurm.mem_per_gpu": "Memory per GPU (`--mem-per-gpu`).",
    "tracking.mlflow": "Log each trial as an MLflow run; null: no MLflow.",
    "tracking.wandb": "Log each trial as a W&B run; null: no W&B.",
    "slurm.cpus_per_node": "CPUs asked for per node (the `--cpus-per-task` of its one task).",
    "slurm.requeue": "Requeue the job when its time runs out.",
    "slurm.signal_seconds": "The warning before the time limit, to stop and save.",
    "slurm.env": "Environment variables.",
    "slurm.dashboard": "Start Ray's dashboard.",
    "slurm.workdir": "The folder the job runs in.",
    "slurm.job_dir": "Where jobs keep their files.",
    "slurm.node_gpus": "GPUs one node has.",
    "slurm.cpus_per_gpu": "CPUs to ask for with each GPU.",
    "slurm.gpu_option": "How the job asks for GPUs: `--gpus-per-node=N`.",
    "slurm.container.runtime": "The program that runs the image: `apptainer`, or `singularity` "
                               "(SingularityCE, LUMI's runtime).",
    "slurm.container.binds": "Host paths the job needs inside, as `-B` takes them "
                             "(`src[:dst[:ro|rw]]`): the workdir, the results, the venv, "
                             "project and scratch folders. Keep dst = src: hpo hands the same "
                             "paths to the inside and to srun outside.",
    "slurm.container.env": "Variables set inside the container only (exported with the "
                           "runtime's `APPTAINERENV_`/`SINGULARITYENV_` prefix, which the "
                           "image's own environment cannot override), e.g. LUMI's "
                           "`FI_MR_CACHE_MONITOR: userfaultfd`.",
    "slurm.gpu_vendor": "The nodes' GPU maker; `amd` (ROCm) refuses Horovod on its GPUs.",
    "slurm.hostname_suffix": "Appended to a node's name for its address.",
    "distributed.env": "Environment variables of the rank processes.",
    "tracking.mlflow.tracking_uri": "Where MLflow keeps the runs, e.g. `sqlite:///mlflow.db`.",
    "tracking.mlflow.experiment_name": "The MLflow experiment.",
    "tracking.mlflow.tags": "Tags set on every run.",
    "tracking.wandb.project": "The W&B project.",
    "tracking.wandb.group": "The W&B group of the runs.",
    "tracking.wandb.mode": "`online`: runs go to W&B as they go; `offline`: written locally "
                           "for `wandb sync`.",
}
#: What each distribution draws (KINDS in hpo.spec.distributions), by YAML name.
KIND_MEANINGS: dict[str, str] = {
    "uniform": "a float, uniform between low and high",
    "quniform": "`uniform` rounded to a multiple of q",
    "loguniform": "a float, uniform on a log scale",
    "qloguniform": "`loguniform` rounded to a multiple of q",
    "randint": "an integer from low up to high, high excluded",
    "qrandint": "an integer from low to high, a multiple of q, high included",
    "lograndint": "an integer on a log scale, high excluded",
    "qlograndint": "an integer on a log scale, a multiple of q, high included",
    "randn": "a float from a normal distribution",
    "qrandn": "`randn` rounded to a multiple of q",
    "choice": "one of the values, drawn at random (Optuna: categorical)",
    "grid": "every value in turn: each sample runs once with each (`num_samples` x values "
            "trials); not with `search.type: optuna`",
}
