"""The Beam side of lmshards: corpus reading and preprocessing into TFRecord shards (what Dataflow workers run).

Never imports train/; both sides share only schemas/.
"""
