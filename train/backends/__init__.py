"""Training backends: one module per backend, named in train.backends.registry (train.backends.base is the seam)."""
