"""The Ray cluster a verl launch starts or joins (:mod:`~runners.verl.cluster.ray_cluster`, ``backend.ray_address``)
and a Ray cluster over the nodes of a multi-node SLURM job (:mod:`~runners.verl.cluster.slurm_ray`)."""
