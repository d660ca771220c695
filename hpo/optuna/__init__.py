"""Optuna's side of hpo: the search space in Optuna's terms, its storage, the study mirror."""
