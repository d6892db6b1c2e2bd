"""The staged pipeline's Beam transforms: thin wrappers of the stage functions in lmshards.preprocess.stages.

Kept apart so that the default runner's path, which calls those functions directly, never imports Beam.
"""
