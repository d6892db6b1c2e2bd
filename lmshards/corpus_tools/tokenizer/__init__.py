"""`lmshards tokenizer train|inspect`: a Unigram, BPE or WordPiece tokenizer trained on a seeded corpus sample.

config (options and special-token presets) -> sampling (the seeded sample) -> models (building and
training) -> save (the output directory) ; training runs the whole command, corpus_report inspects one.
"""
