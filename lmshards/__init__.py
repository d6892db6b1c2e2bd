"""lmshards: tokenizer, Beam preprocessing and TPU-ready masked-LM training."""

from schemas.version import __version__

__all__ = ["__version__"]
