"""The contract between preprocess (writer) and train (reader): constants, manifest, tokenizer identity.

Imports only the standard library and fsspec, so both Dataflow workers and trainers can use it.
"""
