"""What every input format is built from: reading options, compression, byte ranges, lines, documents.

The formats (`lmshards.preprocess.sources.formats`) import only these; discovery and the reader above them
(`lmshards.preprocess.sources`) choose a format per file.
"""
