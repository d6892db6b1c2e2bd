"""The pipeline's Beam counters: one namespace for all, so the Dataflow monitoring page lists them together."""

from __future__ import annotations

from apache_beam.metrics import Metrics

METRICS_NAMESPACE = "lmshards"


def counter(name: str):
    """The Beam counter `name` in METRICS_NAMESPACE (create it in a DoFn's __init__, increment it in process)."""
    return Metrics.counter(METRICS_NAMESPACE, name)
