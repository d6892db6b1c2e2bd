"""What every input format is built from: reading options, compression, byte ranges, lines, documents.

The formats (`preprocess.sources.formats`) import only these; discovery and the reader above them
(`preprocess.sources`) choose a format per file.
"""
