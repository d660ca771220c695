"""The driver: runs an experiment (fresh or resumed) on an embedded or a connected Ray."""
