"""The Beam side of lmshards: corpus reading, tokenizer training, preprocessing into TFRecord shards.

Never imports train/; both sides share only schemas/.
"""
