"""Ray's trial scheduler built from the spec's `scheduler` section (from_spec.py), and hpo's
subclasses of Ray's schedulers: the FIFO choice that skips ended trials (fifo_choice.py) and
random streams of a scheduler's own (seedable.py, seedable_bandits.py, seeded_draws.py).
RASDA's scheduler is a plug-in of its own (hpo.driver.plugins.rasda)."""
