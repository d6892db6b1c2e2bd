"""The Dataflow production path: the Flex Template's parameters, and the Dataflow job built offline.

Pipeline changes this path still needs are the skipped tests at the end of this file, each with
the exact change in its reason.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")

from google.cloud import dataflow_v1beta3  # noqa: E402  (ships with apache-beam[gcp])

from preprocess.options import LmshardsPreprocessOptions, PreprocessConfig, config_from_options  # noqa: E402
from tests.conftest import REPO  # noqa: E402

METADATA = REPO / "dataflow_templates" / "preprocess" / "metadata.json"
# Flags whose allowed values the reader checks rather than argparse.
READER_CHOICES_MODULE = "preprocess.inputs"
GCS_PARAM_TYPES = {"GCS_READ_FILE", "GCS_READ_FOLDER", "GCS_WRITE_FOLDER", "GCS_WRITE_FILE"}


def _flag_actions() -> dict[str, argparse.Action]:
    """dest -> argparse action of every `lmshards preprocess` flag (Beam's own options excluded)."""
    parser = argparse.ArgumentParser()
    LmshardsPreprocessOptions._add_argparse_args(parser)
    return {a.dest: a for a in parser._actions if not isinstance(a, argparse._HelpAction)}


def _metadata_params() -> dict[str, dict]:
    return {p["name"]: p for p in json.loads(METADATA.read_text(encoding="utf-8"))["parameters"]}


def _required_flags(actions: dict[str, argparse.Action]) -> set[str]:
    """Flags whose PreprocessConfig field has no default (the config names --input `inputs`)."""
    no_default = {f.name for f in dataclasses.fields(PreprocessConfig)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return {dest for dest in actions if dest in no_default or f"{dest}s" in no_default}


def _choices(dest: str, action: argparse.Action) -> tuple[str, ...] | None:
    if action.choices:
        return tuple(action.choices)
    if dest == "doc_separator":
        from preprocess.inputs import DOC_SEPARATORS

        return tuple(DOC_SEPARATORS)
    return None


def test_metadata_is_a_valid_dataflow_template_metadata():
    """Parsed strictly by the Dataflow API's own message type: an unknown or misspelt field fails."""
    metadata = dataflow_v1beta3.TemplateMetadata.from_json(METADATA.read_text(encoding="utf-8"))
    assert metadata.name and metadata.description and not metadata.streaming
    assert all(p.label and p.help_text for p in metadata.parameters)


def test_metadata_parameters_match_the_pipeline_flags_one_to_one():
    actions, params = _flag_actions(), _metadata_params()
    assert sorted(params) == sorted(actions)
    required = _required_flags(actions)
    assert required == {"input", "tokenizer", "output"}
    for name, param in params.items():
        action = actions[name]
        assert param["isOptional"] == (name not in required), name
        choices = _choices(name, action)
        if choices:
            assert param["paramType"] == "ENUM", name
            assert [o["value"] for o in param["enumOptions"]] == list(choices), name
        if action.type in (int, float):
            assert param["paramType"] == "NUMBER", name
        if isinstance(action, argparse._StoreTrueAction):
            assert param["paramType"] == "BOOLEAN", name
        if action.default is None or action.default is False:
            assert "defaultValue" not in param, name
        else:
            assert param["defaultValue"] == str(action.default), name


def test_metadata_regexes_accept_defaults_and_gcs_paths_only_where_paths_go():
    for name, param in _metadata_params().items():
        patterns = [re.compile(r) for r in param.get("regexes", [])]
        if "defaultValue" in param:
            assert all(p.fullmatch(param["defaultValue"]) for p in patterns), name
        if param["paramType"] in GCS_PARAM_TYPES:
            assert patterns, name
            assert all(p.fullmatch("gs://bucket/corpus/*.jsonl.gz") for p in patterns), name
            assert not any(p.fullmatch("/home/me/corpus.txt") for p in patterns), name
    assert {n for n, p in _metadata_params().items() if p["paramType"] in GCS_PARAM_TYPES} == {"input", "tokenizer", "output"}


def _launcher_argv(params: dict[str, dict], *, types: set[str]) -> list[str]:
    """The --name=value flags the Flex Template launcher passes, one sample value per parameter."""
    samples = {"GCS_READ_FILE": "gs://bucket/in/*.txt", "GCS_WRITE_FOLDER": "gs://bucket/out", "BOOLEAN": "true",
               "TEXT": "body"}
    argv = []
    for name, param in params.items():
        if param["paramType"] not in types:
            continue
        value = param.get("defaultValue") or samples.get(param["paramType"]) or param.get("enumOptions", [{}])[0].get("value") or "3"
        argv.append(f"--{name}={value}")
    return argv


def test_every_template_parameter_parses_as_the_launcher_passes_it():
    from apache_beam.options.pipeline_options import PipelineOptions

    params = _metadata_params()
    argv = _launcher_argv(params, types={p["paramType"] for p in params.values()} - {"BOOLEAN"})
    config = config_from_options(PipelineOptions(argv))
    assert config.inputs == ("gs://bucket/in/*.txt",) and config.output == "gs://bucket/out"
    assert config.seq_len == 128 and config.remainder == "drop" and config.doc_separator == "line"
