"""The trainer: tf.data over preprocess shards -> a Keras 3 (keras-hub) masked LM under tf.distribute.

Nothing here imports preprocess/; the shards' contract lives in schemas/.
"""

import os

# Keras reads its backend once, when its config is first imported: by `import keras` or keras-hub,
# and already by `import tensorflow`. The trainer needs TensorFlow's (tf.distribute, tf.data,
# GradientTape). Every module of this package is imported through this file, so setting it here
# precedes any keras or tensorflow import in train/.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
