"""Tools around the corpus and the shards that no Dataflow worker runs: tokenizer training and
inspection (tokenizer/), dataset export (dataset/), one subpackage per command family.

Not part of the worker distribution. May import lmshards.preprocess/ (e.g. lmshards.preprocess.sources to read a
corpus) and schemas/; never imports train/.
"""
