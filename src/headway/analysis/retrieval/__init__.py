"""What the models trained on the retrieval task do: head scores and roles, interventions and circuits, path
patching, depth probes, the mechanism classifier and the depth bound's reachable fraction."""
