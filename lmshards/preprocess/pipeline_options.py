"""`lmshards preprocess` flags as Beam pipeline options: what Beam's parser (here and on every worker)
needs to know them, apart from lmshards.preprocess.options so that the default path never imports Beam."""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

from lmshards.preprocess.options import (
    PreprocessConfig,
    add_preprocess_arguments,
    config_from_flags,
)


class LmshardsPreprocessOptions(PipelineOptions):
    """The flags of `lmshards preprocess`; every other flag is a Beam pipeline option."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        add_preprocess_arguments(parser)


def config_from_options(options: PipelineOptions) -> PreprocessConfig:
    """Our flags among Beam's options, as a PreprocessConfig. Raises PreprocessError on a bad value."""
    return config_from_flags(options.view_as(LmshardsPreprocessOptions))
