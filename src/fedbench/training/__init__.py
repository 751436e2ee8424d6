"""The local-training layer, below the algorithms: flat parameter vectors, numerics, the step context, the client
runners (thin, Lightning, the vmap cohort), the client trainer with its counter-based streams, the client-state
store, learning-rate schedules and evaluation. Nothing here knows which algorithm it runs: an algorithm declares
what it needs (``Algorithm.batchable``, ``plain_sgd``, ``affine_steps``) and the run layer (``fedbench.engine``)
passes that down."""
