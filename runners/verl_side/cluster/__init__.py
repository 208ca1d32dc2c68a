"""The Ray cluster a verl launch starts or joins (:mod:`~runners.verl_side.cluster.ray_cluster`, ``backend.ray_address``)
and a Ray cluster over the nodes of a multi-node SLURM job (:mod:`~runners.verl_side.cluster.slurm_ray`)."""
