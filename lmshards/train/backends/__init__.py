"""Training backends: one module per backend, named in lmshards.train.backends.registry (lmshards.train.backends.base is the seam)."""
