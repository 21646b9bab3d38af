"""The toy's INT8 UNet recipes: full INT8 with one more layer group in float, under its two names,
and the ignored scope it quantizes with (no UNet is quantized here)."""

import pytest

from sdaccel.cpu.quantize import SENSITIVE_LAYER_PATTERNS
from sdaccel.toy import int8_unets


def test_the_float_group_recipes_keep_one_list_under_both_names():
    """The toy's rows and the real-size benchmark quantize full INT8 with the ResNets in float from
    one list: the sensitive layers every recipe keeps, then the group."""
    ignored = int8_unets.float_group_ignored("full_int8_float_resnets")
    assert ignored == int8_unets.float_group_ignored("full_int8, float resnets")
    assert ignored == [*SENSITIVE_LAYER_PATTERNS, r".*resnets.*"]
    with pytest.raises(ValueError, match="'full_int8' keeps no layer group in float; choose from"):
        int8_unets.float_group_ignored("full_int8")


def test_every_float_group_recipe_has_a_one_word_name():
    """The row keys and flags name each recipe in one word; every such name maps to a recipe."""
    assert set(int8_unets.FLOAT_GROUP_RECIPES.values()) == set(int8_unets.FLOAT_GROUP_VARIANTS)
    assert all(" " not in name for name in int8_unets.FLOAT_GROUP_RECIPES)
