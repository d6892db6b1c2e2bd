"""Corpus tools run before the pipeline: tokenizer training and inspection, dataset export.

Not part of the Dataflow worker distribution (no worker runs them). Reads corpora with
preprocess.sources and writes through schemas/; never imports train/.
"""
