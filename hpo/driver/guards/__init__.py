"""What keeps a run's work whole on an HPC system: stops that neither lose nor double a step
(stops, history), one writer per experiment folder (lease), full or failing storage
(storage_faults), the allocation's end (walltime); lost nodes are forgiven in
hpo.ray_adapters.node_loss."""
