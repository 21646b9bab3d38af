"""sdaccel.course.whole_image_rows: the row keys of benchmarks/bench_whole_image.py, their order and
the keys of the further INT8 recipes' few-step rows."""

import pytest

from sdaccel.course import whole_image_rows as rows


def test_the_rows_are_unique_and_start_from_the_baseline():
    assert len(set(rows.ROWS)) == len(rows.ROWS)
    assert rows.ROWS[0] == rows.BASELINE == "torch_fp32_20"
    assert set(rows.LCM_ROWS) <= set(rows.ROWS)


def test_the_first_recipe_keeps_the_key_and_the_others_get_their_own():
    assert rows.lcm_row_key("lcm4_lora_int8", 0, "full_int8") == "lcm4_lora_int8"
    assert rows.lcm_row_key("lcm4_lora_int8", 1, "full_int8") == "lcm4_lora_full_int8"
    assert rows.lcm_row_key("lcm4_lora_int8_taesd", 2, "hybrid") == "lcm4_lora_hybrid_taesd"
    assert (
        rows.lcm_row_key("lcm4_lora_int8_static_taesd", 1, "full_int8") == "lcm4_lora_full_int8_static_taesd"
    )


@pytest.mark.parametrize(
    ("key", "static", "tiny"),
    [
        ("lcm4_lora_int8", False, False),
        ("lcm4_lora_int8_taesd", False, True),
        ("lcm4_lora_int8_static", True, False),
        ("lcm4_lora_int8_static_taesd", True, True),
        ("lcm4_lora_full_int8_float_resnets_static", True, False),
        ("lcm4_lora_hybrid_static_taesd", True, True),
        ("lcm4_lora_hybrid_taesd", False, True),
        ("ov_stack_20", False, False),  # the stack compiles static too, but is no few-step row
        ("jax_lcm4_lora_taesd", False, True),
    ],
)
def test_what_a_few_step_row_compiles_and_decodes_with_is_read_from_its_key(key, static, tiny):
    assert rows.is_static_few_step(key) is static
    assert rows.decodes_tiny(key) is tiny


@pytest.mark.parametrize(
    ("variant", "key"),
    [
        ("float", "ov_float_20"),
        ("hybrid", "ov_hybrid_20"),
        ("full_int8", "ov_full_int8_20"),
        ("full_int8_float_resnets", "ov_full_int8_float_resnets_20"),
    ],
)
def test_openvino_row_keys_and_their_variant(variant, key):
    assert rows.ov_row_key(variant) == key
    assert rows.ov_row_variant(key) == variant
    assert rows.is_openvino(key) and not rows.is_few_step(key)


def test_other_keys_have_no_openvino_variant():
    assert rows.ov_row_variant("jax_fp32_20") is None
    assert rows.ov_row_variant("torch_fp32_20") is None
    # the stack runs DeepCache's two UNets: an OpenVINO row of the usual steps, but no one variant
    for stack in rows.STACK_ROWS:  # the block cut's and the layer cut's
        assert rows.ov_row_variant(stack) is None
        assert rows.is_openvino(stack) and not rows.is_few_step(stack)
    assert not rows.is_openvino("jax_lcm4_lora_taesd") and rows.is_few_step("jax_lcm4_lora_taesd")
    assert rows.is_openvino("lcm4_lora_full_int8_taesd")


def test_further_recipes_sort_after_the_first_and_unknown_keys_last():
    keys = ["zzz", "lcm4_lora_full_int8_taesd", "jax_fp32_20", "torch_fp32_20", "lcm4_lora_int8_taesd"]
    keys += ["lcm4_lora_full_int8_static", "lcm4_lora_int8_static_taesd", "lcm4_lora_int8_static"]
    assert sorted(keys, key=rows.row_order) == [
        "torch_fp32_20",
        "lcm4_lora_int8_taesd",
        "lcm4_lora_full_int8_taesd",  # a further recipe's dynamic rows after the first's,
        "lcm4_lora_int8_static",
        "lcm4_lora_int8_static_taesd",
        "lcm4_lora_full_int8_static",  # and its static rows after the first's static ones
        "jax_fp32_20",
        "zzz",
    ]


def test_a_recipe_key_names_the_first_lcm_recipe_as_any_other():
    assert rows.recipe_key("lcm4_lora_int8", ["full_int8", "hybrid"]) == "lcm4_lora_full_int8"
    assert rows.recipe_key("lcm4_lora_int8_taesd", "int8_weights") == "lcm4_lora_int8_weights_taesd"
    assert rows.recipe_key("lcm4_lora_hybrid_taesd", ["full_int8", "hybrid"]) == "lcm4_lora_hybrid_taesd"
    assert rows.recipe_key("lcm4_lora_int8_static", ["full_int8"]) == "lcm4_lora_full_int8_static"
    assert rows.recipe_key("ov_full_int8_20", None) == "ov_full_int8_20"
    with pytest.raises(ValueError, match="names no --lcm-variant"):
        rows.recipe_key("lcm4_lora_int8", [])


def test_the_resnets_recipe_is_the_one_the_benchmark_and_the_toy_quantize():
    """The row's recipe name is the one the benchmark maps to the toy's float-group recipe, whose
    quantization both the toy's rows and the real-size rows use."""
    from sdaccel.toy import whole_image_quality
    from sdaccel.toy.int8_unets import FLOAT_GROUP_RECIPES, FLOAT_GROUP_VARIANTS

    assert FLOAT_GROUP_RECIPES[rows.FLOAT_RESNETS] in FLOAT_GROUP_VARIANTS
    assert rows.FLOAT_RESNETS in whole_image_quality.VARIANTS  # its quality is measured by default
    assert rows.ov_row_key(rows.FLOAT_RESNETS) == rows.OV_FLOAT_RESNETS_20 in rows.ROWS
