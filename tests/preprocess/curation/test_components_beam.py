"""ConnectedComponents on Beam's in-process runner: a shuffled chain and a star settle to their roots."""

from __future__ import annotations

import random

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from lmshards.preprocess.curation.components import ConnectedComponents


def test_components_of_a_shuffled_chain_and_a_star_with_duplicate_edges():
    rng = random.Random(5)
    labels = list(range(1000, 1400))
    rng.shuffle(labels)
    chain = [(labels[i], labels[i + 1]) for i in range(299)]  # nodes labels[:300]
    star = [(7, n) for n in range(8, 20)] * 2  # every edge twice
    expected = [(n, min(labels[:300])) for n in labels[:300] if n != min(labels[:300])]
    expected += [(n, 7) for n in range(8, 20)]
    with TestPipeline(
        runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=in_memory"])
    ) as p:
        roots = p | beam.Create(chain + star) | ConnectedComponents()
        assert_that(roots, equal_to(expected))
