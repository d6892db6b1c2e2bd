"""The input side: shard sets and their mixture, tf.data pipelines, masking, and the plan of what each step reads."""
