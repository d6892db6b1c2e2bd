"""The files each kind of output owns: token store part names, and layouts lmshards.plumbing.outputs applies."""

from __future__ import annotations

import json

from lmshards.plumbing.outputs import owned_entries
from lmshards.schemas import layouts
from lmshards.schemas.constants import TOKENS_FORMAT


def test_token_part_names_are_made_and_recognised_in_one_place():
    names = {layouts.new_token_part_name() for _ in range(100)}
    assert len(names) == 100 and all(layouts.is_token_part_name(n) for n in names)
    name = next(iter(names))
    for other in (
        "part-0.parquet",
        f"{name}.tmp-{'0' * 32}",
        f"x{name}",
        name.upper(),
        f"dir/{name}",
    ):
        assert not layouts.is_token_part_name(other), other


def test_a_token_store_owns_its_parts_tokenizer_and_scratch_but_not_other_files(tmp_path):
    store = tmp_path / "tokens"
    (store / layouts.TEMP_DIR_NAME).mkdir(parents=True)
    (store / "tokenizer").mkdir()
    (store / "tokenizer" / "tokenizer.json").write_text("{}")
    part = layouts.new_token_part_name()
    (store / part).write_bytes(b"x")
    (store / "part-0.parquet").write_bytes(b"user's")
    (store / "manifest.json").write_text(json.dumps({"format": TOKENS_FORMAT}))
    owned, foreign = owned_entries(str(store), kind=layouts.TOKENS_OUTPUT)
    assert owned == ("manifest.json", layouts.TEMP_DIR_NAME, part, "tokenizer")
    assert foreign == ("part-0.parquet",)
