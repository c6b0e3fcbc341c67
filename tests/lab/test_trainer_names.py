"""docs/trainer-names.md names real settings: every TRL name in its TRL column is a field of
the installed GRPOConfig, every dotted verl key in its verl column is in verl's generated
trainer config, and every grpo_ba flag is one of grpo_ba.py's. Its table of aggregation modes
says what each installed mode computes: every loss type of the installed TRL and every mode of
verl's agg_loss has a row, and each row's formula equals the installed function on a batch
whose groups have different total lengths."""
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


def tables():
    """{header's first cell: [rows as lists of cells]} of the page's tables (a header's tables merged)."""
    out, header = {}, None
    with open(os.path.join(ROOT, "docs", "trainer-names.md")) as f:
        for line in f:
            if not line.startswith("|"):
                header = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells[0]
                out.setdefault(header, [])
            elif not all(cell and set(cell) <= set("-:") for cell in cells):   # not the |---| line
                out[header].append(cells)
    return out


def rows():
    """[(grpo_ba cell, TRL cell, verl cell, OpenRLHF cell)] of the settings tables."""
    return [c[:4] for c in tables()["grpo_ba.py"]]


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
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
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


# =====================================================================================
# The aggregation modes: each row's formula against the installed function
# =====================================================================================

import inspect  # noqa: E402

import torch  # noqa: E402

G = 4


def mode_rows(trainer, policy_losses=False):
    """{mode: formula} of the rows of one trainer ("TRL", "verl", "this project", ...): its
    aggregation modes, or (policy_losses=True) its `policy_loss.loss_mode=...` rows."""
    out = {}
    for cells in tables()["trainer"]:
        if cells[0].startswith(trainer) and CODE.findall(cells[1]):
            mode = CODE.findall(cells[1])[0]
            if mode.startswith("policy_loss.loss_mode=") == policy_losses:
                out[mode.removeprefix("policy_loss.loss_mode=")] = (CODE.findall(cells[2]) or [cells[2]])[0]
    return out


def formula(name, per_token, mask, advantages, horizon=None):
    """The page's formula shapes, written out from its first table: (B, T) terms, (B, T) mask,
    (B,) advantages, rows in contiguous groups of G -> scalar."""
    terms = per_token * mask
    sums, lengths = terms.sum(1), mask.sum(1)                                    # (B,)
    if name == "pooled-token":
        return sums.sum() / lengths.sum()
    if name == "group-token":
        return (sums.view(-1, G).sum(1) / lengths.view(-1, G).sum(1)).mean()
    if name == "sequence":
        return (sums / lengths).mean()
    if name == "sequence-sum":
        return sums.mean()
    if name == "constant":
        return sums.sum() / (sums.numel() * horizon)
    if name == "nonzero-rows-constant":
        return sums.sum() / ((advantages != 0).sum() * horizon)
    if name == "sum":
        return sums.sum()
    if name in ("balanced", "pooled-balanced"):
        size = G if name == "balanced" else advantages.numel()                  # per group, or the whole batch
        a, s, n = advantages.view(-1, size), sums.view(-1, size), lengths.view(-1, size)
        total = 0.0
        for side in (a > 0, a < 0):
            mass = (a.abs() * side).sum(1)                                       # M_s per group
            denominator = (a.abs() * n * side).sum(1)
            total = total + torch.where(denominator > 0, mass / size * (s * side).sum(1) / denominator.clamp(min=1e-12),
                                        torch.zeros_like(mass))
        return total.mean()
    raise KeyError(name)


def unequal_groups():
    """Two groups of G whose total lengths differ (16 and 12): the pooled and per-group token means differ."""
    lengths = torch.tensor([1, 7, 2, 6, 3, 3, 3, 3])
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()                 # (8, 8)
    advantages = torch.tensor([1.0, -1.0, -0.5, 0.5, 1.0, 1.0, -1.0, -1.0])
    return mask, advantages


def test_the_formula_shapes_tell_the_pooled_token_mean_from_the_per_group_one():
    mask, adv = unequal_groups()
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    assert formula("pooled-token", terms, mask, adv) != pytest.approx(formula("group-token", terms, mask, adv).item())
    equal = mask.clone()
    equal[4:, :4] = 1                                                            # second group: 4 x 4 = 16 tokens
    assert formula("pooled-token", terms, equal, adv) == pytest.approx(formula("group-token", terms, equal, adv).item())


def test_the_projects_three_rules_are_their_rows_formulas():
    import grpo_ba
    rows = mode_rows("this project")
    assert set(rows) == set(grpo_ba.AGGREGATORS)
    mask, adv = unequal_groups()
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(1))
    for rule, name in rows.items():                # graded advantages: balanced by advantage mass
        assert grpo_ba.rule_for_any_rewards(rule)(terms, mask, adv, G).item() == pytest.approx(
            formula(name, terms, mask, adv).item(), rel=1e-6), rule


@pytest.mark.slow                                  # imports verl's trainer code
def test_every_verl_mode_has_a_row_whose_formula_is_agg_loss():
    pytest.importorskip("verl", reason="verl is optional: pip install --no-deps verl==0.9.1")
    from verl.trainer.ppo.core_algos import agg_loss
    installed = set(re.findall(r'loss_agg_mode == "([a-z-]+)"', inspect.getsource(agg_loss)))
    installed |= {m for group in re.findall(r"loss_agg_mode in \[([^\]]+)\]", inspect.getsource(agg_loss))
                  for m in re.findall(r'"([a-z-]+)"', group)}
    rows = mode_rows("verl")
    assert len(installed) >= 5 and set(rows) == installed, (sorted(installed), sorted(rows))
    mask, adv = unequal_groups()
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2))
    for mode, name in rows.items():
        verl_value = agg_loss(terms, mask, mode, loss_scale_factor=5 if mode == "seq-mean-token-sum-norm" else None)
        assert verl_value.item() == pytest.approx(formula(name, terms, mask, adv, horizon=5).item(), rel=1e-6), mode


@pytest.mark.slow                                  # builds a tiny model and TRL's trainer
def tiny_trl_trainer(trl, tmp_path, tokenizer, **config):
    """A GRPOTrainer on a tiny Qwen3 on the CPU, in training mode, for calling its loss directly."""
    from datasets import Dataset
    from toy_tasks.model import tiny_qwen3
    args = trl.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], bf16=False, **config)
    trainer = trl.GRPOTrainer(model=tiny_qwen3(tokenizer, seed=0), reward_funcs=lambda completions, **kw: [0.0],
                              args=args, train_dataset=Dataset.from_dict({"prompt": ["1+1="]}),
                              processing_class=tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def test_every_trl_loss_type_has_a_row_whose_formula_is_trls_loss(tmp_path):
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
    from grpo_ba import clipped_token_loss
    from toy_tasks.model import char_tokenizer
    source = inspect.getsource(trl.GRPOTrainer._compute_loss)
    installed = set(re.findall(r'self\.loss_type == "([a-z_]+)"', source))
    installed |= {t for group in re.findall(r"self\.loss_type in \[([^\]]+)\]", source)
                  for t in re.findall(r'"([a-z_]+)"', group)}
    rows = mode_rows("TRL")
    assert {"grpo", "bnpo", "dr_grpo", "dapo"} <= installed and set(rows) == installed, (sorted(installed), sorted(rows))

    tokenizer = char_tokenizer()
    trainer = tiny_trl_trainer(trl, tmp_path, tokenizer, per_device_train_batch_size=8, num_generations=G,
                               max_completion_length=8)
    mask, adv = unequal_groups()
    gen = torch.Generator().manual_seed(3)
    batch = {"prompt_ids": torch.randint(3, 12, (8, 3), generator=gen), "prompt_mask": torch.ones(8, 3).long(),
             "completion_ids": torch.randint(3, 12, (8, 8), generator=gen) * mask.long(),
             "completion_mask": mask.long(), "advantages": adv, "num_items_in_batch": mask.sum()}
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    for loss_type, name in rows.items():
        trainer.loss_type = loss_type
        trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"
        trainer.epsilon_high = 5.0 if loss_type == "cispo" else 0.2          # cispo's cap on the ratio, above 1
        trl_loss = trainer.compute_loss(trainer.model, dict(batch))           # on-policy: ratio 1
        trl_grads = torch.autograd.grad(trl_loss, params)
        logp = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 8)[0]
        ours = formula(name, clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv,
                       horizon=trainer.max_completion_length)
        our_grads = torch.autograd.grad(ours, params)
        for a, b in zip(trl_grads, our_grads):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), loss_type
        if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):          # the clipped term's value too
            assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7), loss_type


def test_a_sign_split_over_the_whole_micro_batch_is_not_the_per_group_balanced_rule():
    """The unofficial verl patch's shape (`pooled-balanced`): one group gives the paper's J_BA;
    two groups whose sign lengths differ do not, on a batch of the rows the patch would see."""
    assert "pooled-balanced" in [cells[2].strip("`") for cells in tables()["trainer"]
                                 if cells[0].startswith("unofficial verl patch")]
    mask, adv = unequal_groups()
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(4))
    balanced = grpo_ba.aggregate_balanced_by_advantage_mass     # graded advantages (docs/method.md §4)
    assert formula("pooled-balanced", terms, mask, adv).item() != pytest.approx(
        balanced(terms, mask, adv, G).item(), rel=1e-3)
    one = slice(0, G)
    assert formula("pooled-balanced", terms[one], mask[one], adv[one]).item() == pytest.approx(
        balanced(terms[one], mask[one], adv[one], G).item(), rel=1e-6)
    zero = torch.zeros(mask.shape)                               # on-policy, the weight on each sign moves
    at_one = grpo_ba.clipped_token_loss(zero, zero, adv, mask)
    assert formula("pooled-balanced", at_one, mask, adv).item() == pytest.approx(0.0, abs=1e-6)   # both sum to 0 here
    per_group = [formula("pooled-balanced", terms[p * G:(p + 1) * G], mask[p * G:(p + 1) * G],
                         adv[p * G:(p + 1) * G]).item() for p in range(2)]
    assert sum(per_group) / 2 == pytest.approx(formula("balanced", terms, mask, adv).item(), rel=1e-6)


@pytest.mark.slow                                  # imports verl's trainer code
def test_verls_seq_mean_token_sum_norm_default_divides_by_the_padded_width_not_a_constant(verl_base_config):
    from verl.trainer.ppo.core_algos import agg_loss
    assert verl_base_config.actor_rollout_ref.actor.loss_scale_factor is None       # loss_scale_factor: null
    mask, adv = unequal_groups()
    terms = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5))
    padded_terms, padded_mask = torch.cat([terms, terms[:, :4]], 1), torch.cat([mask, torch.zeros(8, 4)], 1)
    narrow = agg_loss(terms, mask, "seq-mean-token-sum-norm", loss_scale_factor=None)
    wide = agg_loss(padded_terms, padded_mask, "seq-mean-token-sum-norm", loss_scale_factor=None)
    assert narrow.item() == pytest.approx(formula("constant", terms, mask, adv, horizon=8).item(), rel=1e-6)
    assert wide.item() == pytest.approx(narrow.item() * 8 / 12, rel=1e-6)          # same tokens, more padding


@pytest.mark.slow                                  # imports verl's trainer code
def test_verls_sapo_and_geo_mean_policy_losses_ignore_loss_agg_mode(verl_base_config):
    from conftest import verl_actor_config
    from verl.trainer.ppo import core_algos
    from verl.utils.config import omega_conf_to_dataclass
    rows = mode_rows("verl", policy_losses=True)
    assert set(rows) == {"sapo", "geo_mean"} and rows["sapo"] == "sequence"
    mask, adv = unequal_groups()
    gen = torch.Generator().manual_seed(6)
    logp = -torch.rand(mask.shape, generator=gen) * 3
    old = logp + 0.3 * torch.randn(mask.shape, generator=gen)
    advantages = adv[:, None] * mask
    for loss_mode in rows:
        _, node = verl_actor_config(verl_base_config, 2, "token-mean", G, 0.2, 0.28)
        node.policy_loss.loss_mode = loss_mode
        actor = omega_conf_to_dataclass(node)
        actor.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None)
        values = {mode: core_algos.get_policy_loss_fn(loss_mode)(
            old_log_prob=old, log_prob=logp, advantages=advantages, response_mask=mask.bool(), loss_agg_mode=mode,
            config=actor)[0].item() for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")}
        assert len({round(v, 6) for v in values.values()}) == 1, (loss_mode, values)
    vanilla = omega_conf_to_dataclass(verl_actor_config(verl_base_config, 2, "token-mean", G, 0.2, 0.28)[1])
    vanilla.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None)
    different = {mode: core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=advantages,
                                                              response_mask=mask.bool(), loss_agg_mode=mode,
                                                              config=vanilla)[0].item()
                 for mode in ("token-mean", "seq-mean-token-mean")}
    assert different["token-mean"] != pytest.approx(different["seq-mean-token-mean"], rel=1e-3)   # the control


def test_trls_scale_rewards_batch_and_kl_ratio_rows_name_the_installed_defaults():
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
    source = inspect.getsource(trl.GRPOTrainer)
    assert 'self.scale_rewards == "batch"' in source and "use_bias_correction_kl" in source
    fields = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    assert fields["use_bias_correction_kl"] is True
    trl_cells = " ".join(cells[1] for cells in tables()["grpo_ba.py"])
    assert '`scale_rewards="batch"`' in trl_cells and "`use_bias_correction_kl=True`" in trl_cells


@pytest.mark.slow                                  # builds a tiny model and TRL's trainer
def test_trls_grpo_loss_is_the_sequence_rule_even_when_a_micro_batch_splits_a_group(tmp_path):
    """12 rows (3 groups of 4) in two micro-batches of 6 rows, the middle group split: TRL's grpo
    loss accumulated over the two (GA = 2) is J_seq of the 12 rows, loss and gradient."""
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
    from datasets import Dataset
    from grpo_ba import clipped_token_loss
    from toy_tasks.model import char_tokenizer, tiny_qwen3
    tokenizer = char_tokenizer()
    config = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=6, num_generations=G,
                            max_completion_length=8, use_cpu=True, report_to=[], bf16=False, loss_type="grpo",
                            gradient_accumulation_steps=2)
    trainer = trl.GRPOTrainer(model=tiny_qwen3(tokenizer, seed=0), reward_funcs=lambda completions, **kw: [0.0],
                              args=config, train_dataset=Dataset.from_dict({"prompt": ["1+1="]}),
                              processing_class=tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    lengths = torch.tensor([1, 7, 2, 6, 3, 3, 3, 3, 5, 1, 8, 2])
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()
    adv = torch.tensor([1.0, -1.0, -0.5, 0.5, 1.0, 1.0, -1.0, -1.0, 0.3, -0.3, 0.9, -0.9])
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 12, (12, 3), generator=gen)
    completion = torch.randint(3, 12, (12, 8), generator=gen) * mask.long()
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trl_loss = 0.0
    for rows in (slice(0, 6), slice(6, 12)):
        batch = {"prompt_ids": ids[rows], "prompt_mask": torch.ones(6, 3).long(), "completion_ids": completion[rows],
                 "completion_mask": mask[rows].long(), "advantages": adv[rows], "num_items_in_batch": mask.sum()}
        trl_loss = trl_loss + trainer.compute_loss(trainer.model, batch)
    trl_grads = torch.autograd.grad(trl_loss, params)
    logp = trainer._get_per_token_logps_and_entropies(trainer.model, torch.cat([ids, completion], 1),
                                                      torch.cat([torch.ones(12, 3), mask], 1).long(), 8)[0]
    ours = grpo_ba.aggregate_sequence(clipped_token_loss(logp, logp.detach(), adv, mask), mask, adv, G)
    assert trl_loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    for a, b in zip(trl_grads, torch.autograd.grad(ours, params)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


# =====================================================================================
# Issue 67: TRL's grpo is not a per-group token mean (TRL #5375, verl #2776)
# =====================================================================================


def two_group_example():
    """docs/trainer-names.md's example: G = 2, lengths [1, 3] and [2, 2], A = [+1, -1, +1, -1]."""
    lengths = torch.tensor([1, 3, 2, 2])
    return (torch.arange(3)[None, :] < lengths[:, None]).float(), torch.tensor([1.0, -1.0, 1.0, -1.0])


def example_rows():
    """{formula: (the four token weights, share on right answers, J at ratio 1)} of the page's table."""
    out = {}
    for cells in tables()["aggregation"]:
        numbers = [float(x) for x in re.findall(r"\d+\.\d+", " ".join(cells[1:]))]
        out[CODE.findall(cells[0])[0]] = (numbers[:4], numbers[4], numbers[5])
    return out


@pytest.mark.slow                                  # builds a tiny model and TRL's trainer
def test_trls_grpo_is_not_a_per_group_token_mean_on_the_two_group_example(tmp_path):
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
    from grpo_ba import aggregation_coefficients, clipped_token_loss, positive_share
    from toy_tasks.model import char_tokenizer
    mask, adv = two_group_example()
    zero = torch.zeros(mask.shape)
    rows = example_rows()
    assert set(rows) == {"sequence", "group-token"}
    computed = {}
    for name, rule in (("sequence", "sequence"), ("group-token", "token")):
        weights = aggregation_coefficients(mask, adv, 2, rule)[:, 0].tolist()
        share = positive_share(mask, adv, 2, rule)
        value = grpo_ba.AGGREGATORS[rule](clipped_token_loss(zero, zero, adv, mask), mask, adv, 2).item()
        computed[name] = (weights, share, value)
        page_weights, page_share, page_value = rows[name]
        assert [f"{w:.4f}" for w in weights] == [f"{w:.4f}" for w in page_weights], name
        assert (f"{share:.3f}", f"{value:.3f}") == (f"{page_share:.3f}", f"{page_value:.3f}"), name
    assert computed["sequence"][0] != pytest.approx(computed["group-token"][0])          # not a per-group token mean

    # the grpo row is TRL's own loss: its value and gradient at ratio 1 on this batch
    tokenizer = char_tokenizer()
    trainer = tiny_trl_trainer(trl, tmp_path, tokenizer, per_device_train_batch_size=4, num_generations=2,
                               max_completion_length=3, loss_type="grpo")
    gen = torch.Generator().manual_seed(5)
    batch = {"prompt_ids": torch.randint(3, 12, (4, 3), generator=gen), "prompt_mask": torch.ones(4, 3).long(),
             "completion_ids": torch.randint(3, 12, (4, 3), generator=gen) * mask.long(),
             "completion_mask": mask.long(), "advantages": adv, "num_items_in_batch": mask.sum()}
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    trl_loss = trainer.compute_loss(trainer.model, dict(batch))
    trl_grads = torch.autograd.grad(trl_loss, params)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logp = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 3)[0]
    terms = clipped_token_loss(logp, logp.detach(), adv, mask)
    for name, sign in (("sequence", True), ("group-token", False)):
        weights = torch.tensor(computed[name][0])[:, None] * mask                    # the row's exact weights
        ours = torch.autograd.grad((weights * terms).sum(), params, retain_graph=True)
        same = all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(trl_grads, ours))
        assert same is sign, name                     # TRL's grpo gradient is the sequence row's, not group-token's
    assert trl_loss.item() == pytest.approx(rows["sequence"][2], abs=1e-6)


def test_the_luspo_row_says_trl_keeps_a_token_level_ratio_by_default():
    """TRL's luspo with its default importance_sampling_level="token" only warns: the ratio stays
    token-level, so the row may not say "with a sequence-level ratio" without the setting."""
    trl = pytest.importorskip("trl", reason="TRL is optional: pip install -r requirements/trl.txt")
    fields = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    assert fields["importance_sampling_level"] == "token"
    config = trl.GRPOConfig(output_dir="unused", loss_type="luspo", use_cpu=True, report_to=[])   # accepted
    assert config.importance_sampling_level == "token"
    (row,) = [cells for cells in tables()["trainer"] if cells[1] == "`luspo`"]
    assert "token-level" in row[2] and '`importance_sampling_level="sequence"`' in row[2]
    assert "with a sequence-level ratio" not in row[2]
