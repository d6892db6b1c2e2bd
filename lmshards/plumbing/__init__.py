"""What every lmshards tool shares that is not the wire contract: the CLI convention, the filesystem
layer and atomic writes, output ownership and the `--overwrite` rules, errors on user input.

Imported by preprocess/, train/ and corpus_tools/ alike, and shipped to Dataflow workers with preprocess/.
"""
