"""The model-family registry: lookups, what each family declares, and the CLI choices drawn from it."""

from __future__ import annotations

import pytest

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.config import ModelConfig, model_config_from_dict
from lmshards.train.families import DEFAULT_FAMILY, FAMILIES, family_names, get_family


def test_an_unknown_family_is_an_error_listing_the_known_ones():
    with pytest.raises(
        LmshardsError,
        match=r"Unknown model family 'robert'; choose one of \['roberta', 'bert', 'modernbert'\]",
    ):
        get_family("robert")
    with pytest.raises(LmshardsError, match="Unknown model family 'gpt2'"):
        model_config_from_dict({"family": "gpt2"}, source="model.json")
    assert family_names() == tuple(FAMILIES) == ("roberta", "bert", "modernbert")
    assert all(get_family(name).name == name for name in family_names())
    assert ModelConfig().family == DEFAULT_FAMILY == "roberta"


def test_every_family_names_real_keras_hub_and_transformers_classes():
    import keras_hub
    import transformers

    from lmshards.train.network.model import keras_hub_classes

    for family in FAMILIES.values():  # keras-hub's classes, or those of the family's own network
        backbone_cls, masked_lm_cls = keras_hub_classes(family)
        assert issubclass(backbone_cls, keras_hub.models.Backbone)
        assert issubclass(masked_lm_cls, keras_hub.models.MaskedLM)
        model_cls = getattr(transformers, family.hf_masked_lm_class)
        assert model_cls.config_class is getattr(transformers, family.hf_config_class)


def test_position_offset_and_token_aliases_follow_each_familys_transformers_form():
    roberta, bert = get_family("roberta"), get_family("bert")
    assert roberta.hf_position_offset(1) + 512 == 514  # roberta-base's position table
    assert bert.hf_position_offset(1) == 0
    roles = {"cls": 0, "pad": 1, "sep": 2, "mask": 4}
    assert roberta.hf_token_ids(roles) == {"bos_token_id": 0, "eos_token_id": 2}
    assert roberta.hf_token_ids({"pad": 1}) == {"bos_token_id": None, "eos_token_id": None}
    assert bert.hf_token_ids(roles) == {}


def test_model_family_choices_come_from_the_registry(capsys):
    from lmshards.train.commands.cli import build_parser, parse_config

    (action,) = [a for a in build_parser()._actions if a.dest == "model_family"]
    assert tuple(action.choices) == family_names()
    # The default is filled in after parsing (with --init_from the source's family is the default).
    assert (
        parse_config(["--shards", "s", "--output", "o", "--steps", "1"]).model_family
        == DEFAULT_FAMILY
    )
    assert (
        parse_config(
            ["--shards", "s", "--output", "o", "--steps", "1", "--model_family", "bert"]
        ).model_family
        == "bert"
    )
    with pytest.raises(SystemExit) as exited:
        parse_config(["--shards", "s", "--output", "o", "--steps", "1", "--model_family", "gpt2"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        "lmshards train: error: argument --model_family: invalid choice: 'gpt2'"
    )
