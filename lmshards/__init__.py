"""lmshards: tokenizer, Beam preprocessing and TPU-ready masked-LM training."""

from lmshards.schemas.version import __version__

__all__ = ["__version__"]
