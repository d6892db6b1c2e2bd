"""The model-family registry: a family's name -> what its module declares (see base.ModelFamily).

Adding a family is one module beside these (defining FAMILY) and its name in `_FAMILY_MODULES`.

>>> family_names()
('roberta', 'bert', 'modernbert')
>>> roberta = get_family("roberta")
>>> roberta.keras_masked_lm, roberta.hf_masked_lm_class
('RobertaMaskedLM', 'RobertaForMaskedLM')
>>> roberta.hf_position_offset(pad_token_id=1)  # transformers numbers RoBERTa's positions after padding
2
"""

from __future__ import annotations

import importlib

from lmshards.plumbing.errors import LmshardsError
from lmshards.train.families.base import HfHeadNames, ModelFamily

# Modules of this package, one per family, in the order --model_family lists them.
_FAMILY_MODULES = ("roberta", "bert", "modernbert")

FAMILIES: dict[str, ModelFamily] = {
    family.name: family
    for family in (importlib.import_module(f"{__name__}.{m}").FAMILY for m in _FAMILY_MODULES)
}
DEFAULT_FAMILY = "roberta"

__all__ = [
    "DEFAULT_FAMILY",
    "FAMILIES",
    "HfHeadNames",
    "ModelFamily",
    "check_packed_support",
    "family_names",
    "get_family",
]


def family_names() -> tuple[str, ...]:
    return tuple(FAMILIES)


def check_packed_support(family: ModelFamily, sets: str) -> None:
    """Raises LmshardsError when the family cannot train on the packed sets named in `sets`."""
    if family.keras_packed_backbone is None:
        packed = [f.name for f in FAMILIES.values() if f.keras_packed_backbone]
        raise LmshardsError(
            f"--model_family {family.name} cannot take the [batch, seq, seq] attention mask that keeps a "
            f"packed block's documents apart, and {sets} is packed (--packing best_fit); use "
            f"--model_family {' or '.join(packed) or '(none)'}, or a set made with --packing concat."
        )


def get_family(name: str) -> ModelFamily:
    """The registered family called `name`. Raises LmshardsError listing the known names."""
    if name not in FAMILIES:
        raise LmshardsError(f"Unknown model family {name!r}; choose one of {list(FAMILIES)}.")
    return FAMILIES[name]
