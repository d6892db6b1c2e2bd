"""`lmshards train` warns before training when a shard set has nothing to evaluate on."""

from __future__ import annotations

import logging
import types

from lmshards.train.loop.preflight import warn_without_validation


def test_a_shard_set_without_validation_records_is_named_with_the_fix(caplog):
    sets = [
        types.SimpleNamespace(path="gs://b/with", has_validation=True),
        types.SimpleNamespace(path="gs://b/without", has_validation=False),
    ]
    with caplog.at_level(logging.WARNING, logger="lmshards.train.loop.preflight"):
        warn_without_validation(types.SimpleNamespace(sets=sets))
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith("gs://b/without has no validation records: this run reports no eval")
    assert "larger --validation_fraction" in message
