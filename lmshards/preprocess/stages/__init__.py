"""The preprocess pipeline's stages, one module each: logic first, its thin PTransform after it.

read -> encode -> split -> pack -> shard, the manifest written last, and the token store
(`tokens.py`, for --keep_tokens). `metrics.py` holds the counters every stage reports. Stages import
only `lmshards.preprocess.sources`, `schemas` and `plumbing`; `lmshards.preprocess.pipeline` wires them.
"""
