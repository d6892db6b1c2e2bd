"""Curation before tokenizing: exact and near-duplicate removal and eval-set decontamination.

Modules, logic first, each with its thin Beam wrapper:
- text.py: the normalizations, digests, words and word n-gram hashes;
- minhash.py: the seeded MinHash family, LSH band keys and their probabilities;
- components.py: connected components of the candidate pairs (large-star / small-star rounds);
- records.py: document identity (source, index), the keep order, removals and audit lines;
- dedup.py, decontaminate.py: which documents go and why;
- audit.py: the audit files, the manifest's counts and their checks;
- stage.py: CurateDocuments, the stage preprocess inserts before tokenization.
"""
