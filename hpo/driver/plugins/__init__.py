"""hpo's plug-ins to Ray Tune: the live view (progress), result files that keep every row
(trial_logs), MLflow and W&B (tracking), Optuna warm start (warm_start), and the RASDA
scheduler (rasda, with its decision and its admission gate; its reaches into Tune's private
parts are in hpo.ray_adapters.tune_rasda)."""
