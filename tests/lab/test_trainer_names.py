"""docs/trainer-names.md names real settings: every TRL name in its TRL column is a field of
the installed GRPOConfig, every dotted verl key in its verl column is in verl's generated
trainer config, and every grpo_ba flag is one of grpo_ba.py's."""
import dataclasses
import importlib.util
import os
import re

import pytest
import yaml

import grpo_ba
from grpo_ba_lab import lab_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE = re.compile(r"`([^`]+)`")


def rows():
    """[(grpo_ba cell, TRL cell, verl cell, OpenRLHF cell)] of the page's tables."""
    with open(os.path.join(ROOT, "docs", "trainer-names.md")) as f:
        cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in f if line.startswith("| ")]
    return [c[:4] for c in cells if c[0] not in ("grpo_ba.py",) and not set(c[0]) <= set("-")]


def names(cell, pattern):
    """Names in backticks (up to an '=' or '('), kept when they match `pattern`."""
    found = [re.split(r"[=( ]", code)[0] for code in CODE.findall(cell)]
    return [n for n in found if re.fullmatch(pattern, n)]


def test_the_tables_are_read():
    assert len(rows()) >= 30


def test_every_grpo_ba_flag_exists():
    flags = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(type(lab_args.parse_args([])))}
    named = [n for cell, *_ in rows() for n in names(cell, r"--[a-z-]+")]
    assert len(named) >= 25 and set(named) <= flags, sorted(set(named) - flags)


def test_every_trl_name_is_a_grpo_config_field():
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements-trl.txt")
    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    named = {n for _, cell, _, _ in rows() for n in names(cell, r"[a-z][a-z0-9_]+") if n not in ("prompt",)}
    assert {"num_generations", "loss_type", "epsilon_high", "scale_rewards", "num_iterations"} <= named
    assert named <= fields, sorted(named - fields)


def test_every_dotted_verl_key_is_in_verls_trainer_config():
    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is optional: pip install --no-deps verl==0.9.1")
    path = os.path.join(os.path.dirname(spec.origin), "trainer", "config", "_generated_ppo_trainer.yaml")
    with open(path) as f:
        config = yaml.safe_load(f)
    named = {n for _, _, cell, _ in rows() for n in names(cell, r"[a-z_]+(\.[a-z_]+)+")}
    assert {"actor_rollout_ref.rollout.n", "actor_rollout_ref.actor.loss_agg_mode",
            "actor_rollout_ref.actor.clip_ratio_c", "algorithm.norm_adv_by_std_in_grpo"} <= named
    missing = []
    for key in named:
        node = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    assert missing == []
