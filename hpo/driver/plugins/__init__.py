"""hpo's plug-ins to Ray Tune: the live view (progress), result files that keep every row
(trial_logs), MLflow and W&B (tracking), Optuna warm start (warm_start), and the RASDA
scheduler (rasda, with its decision, its admission gate and every reach into Tune's private
parts in ray_internals)."""
