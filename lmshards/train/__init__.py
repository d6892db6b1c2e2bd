"""The trainer: tf.data over preprocess shards -> a Keras 3 (keras-hub) masked LM, trained by one of the
backends lmshards.train.backend_names lists (TensorFlow's tf.distribute, or Keras on JAX).

Layers, each importing only those before it: lmshards.train.families (data only); this package's modules
(config, backend_names, run_dir, optim and the other shared pieces); lmshards.train.inputs and lmshards.train.network;
lmshards.train.backends; lmshards.train.export; lmshards.train.loop; lmshards.train.commands. Nothing here imports preprocess/; the shards'
contract lives in schemas/.
"""

import os

from lmshards.train.backend_names import DEFAULT_BACKEND, entry

# Keras reads its backend once, when its config is first imported: by `import keras` or keras-hub, and
# already by `import tensorflow`. Every module of this package is imported through this file, so a process
# that never chose a backend (a library user, `lmshards export`) gets the default backend's Keras;
# `lmshards train --backend` chooses before anything loads (lmshards.train.backends.registry.select_keras_backend).
os.environ.setdefault("KERAS_BACKEND", entry(DEFAULT_BACKEND).keras_backend)
