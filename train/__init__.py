"""The trainer: tf.data over preprocess shards -> a Keras 3 (keras-hub) masked LM under tf.distribute.

Nothing here imports preprocess/; the shards' contract lives in schemas/.
"""
