"""The run's tokenizer: --tokenizer, or the copy a shard set carries, checked to be the one the shards were made with.

Without TensorFlow, so a wrong tokenizer is refused before the training stack loads.
"""

from __future__ import annotations

import logging
import posixpath

from lmshards.plumbing import fs
from lmshards.schemas.constants import TOKENIZER_DIR_NAME, TOKENIZER_JSON
from lmshards.schemas.tokenizer_info import TokenizerSource, checked_tokenizer
from lmshards.train.inputs.mixture import Mixture, ShardSet

log = logging.getLogger(__name__)


def shard_set_tokenizer(shard_set: ShardSet) -> str | None:
    """The tokenizer a set carries: the copy its manifest records, else SHARDS_DIR/tokenizer/ when it holds a
    tokenizer.json; None for neither. A copy named tokenizer.json is returned as its directory, so the
    transformers files beside it come along."""
    recorded = shard_set.manifest.tokenizer_path(shard_set.path)
    if recorded is not None:
        return (
            posixpath.dirname(recorded)
            if posixpath.basename(recorded) == TOKENIZER_JSON
            else recorded
        )
    directory = fs.join(shard_set.path, TOKENIZER_DIR_NAME)
    return directory if fs.exists(fs.join(directory, TOKENIZER_JSON)) else None


def run_tokenizer(given: str | None, mixture: Mixture) -> TokenizerSource | None:
    """The run's tokenizer: --tokenizer when given, else the first one a set carries; None if there is none.

    Raises:
      LmshardsError: its fingerprint is not the one the shards were made with.
    """
    path = given or next(filter(None, map(shard_set_tokenizer, mixture.sets)), None)
    if path is None:
        return None
    source = checked_tokenizer(
        path,
        expected=mixture.manifest.tokenizer.fingerprint,
        named="--tokenizer" if given else "The tokenizer in",
        reference=f"the shards in {mixture.sets[0].path!r} were made with",
        fix="Pass the tokenizer given to `lmshards preprocess`, or re-run preprocess with this one."
        if given
        else "The shard set's tokenizer/ was replaced; restore it, or pass the right one with --tokenizer.",
    )
    log.info("Tokenizer: %s", path)
    return source
