"""verl's own loss functions with grpo_token, grpo_sequence and grpo_balanced compute exactly grpo_ba's
aggregate of each rule, per group; verl's token-mean is the per-group token rule only when the
groups' total lengths agree.

Everything on the verl side is verl's code: compute_grpo_outcome_advantage, the registry,
ray_trainer.compute_advantage, compute_policy_loss_vanilla + agg_loss with the global_batch_info
its ppo_loss sets, seqlen_balancing's partitions. The policy is a leaf tensor of
log-probabilities, so gradients are compared token by token.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl is optional: pip install -r requirements/verl.txt && "
                                          "pip install --no-deps verl==0.9.1")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions  # noqa: E402

import grpo_ba_lab.integrations.verl_balanced as vb  # noqa: E402
from conftest import verl_actor_config  # noqa: E402
from grpo_ba import AGGREGATORS, aggregate_sequence, aggregate_token, clipped_token_loss  # noqa: E402

pytestmark = pytest.mark.slow                     # verl's trainer config and loss code, on CPU
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G = 4
EPS_LOW, EPS_HIGH = 0.2, 0.28
REWARDS = [[1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0]]      # one tied group: A = 0 there
LENGTHS = [[2, 9, 1, 7], [3, 5, 4, 12], [6, 2, 8, 3], [10, 4, 2, 6]]    # group totals 19, 24, 19, 22


@pytest.fixture(autouse=True)
def fresh_module_state(monkeypatch):
    monkeypatch.setattr(vb, "_pending", [])
    monkeypatch.setattr(vb, "_warned", set())


def trainer_config(base, prompts, estimator, mode="token-mean", norm=True):
    cfg, _ = verl_actor_config(base, prompts, mode, G, EPS_LOW, EPS_HIGH)
    cfg.algorithm.adv_estimator = estimator
    cfg.algorithm.norm_adv_by_std_in_grpo = norm
    return cfg


def make_batch(rewards, lengths, seed=0):
    """Groups of G in shuffled rows (as verl's balance_batch leaves them).
    -> token_level_rewards (R, T), response_mask (R, T), uids (R,), contiguous order (R,)."""
    rewards, lengths = [r for grp in rewards for r in grp], [n for grp in lengths for n in grp]
    rows, width = len(rewards), max(lengths)
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))   # batch row -> contiguous row
    mask, scores = torch.zeros(rows, width), torch.zeros(rows, width)
    uids = np.empty(rows, dtype=object)
    for row, c in enumerate(perm.tolist()):
        mask[row, :lengths[c]] = 1
        scores[row, lengths[c] - 1] = rewards[c]                 # verl puts the score on the last response token
        uids[row] = f"prompt{c // G}"
    return scores, mask, uids, torch.argsort(perm)


def verl_grpo(scores, mask, uids, norm=True):
    """verl's own GRPO advantages, (R, T), and per row (R,)."""
    adv, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=mask, index=uids,
                                                       norm_adv_by_std_in_grpo=norm)
    return adv, vb.response_advantages(adv, mask)


def verl_policy_loss(cfg, logp, old, advantages, mask, mode, dp_size=1, batch_num_tokens=None, global_batch_size=None):
    """compute_policy_loss_vanilla (its agg_loss inside) with the global_batch_info verl's ppo_loss sets."""
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor.global_batch_info.update(dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                                   global_batch_size=global_batch_size, loss_scale_factor=actor.loss_scale_factor)
    return core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=advantages,
                                                  response_mask=mask.bool(), loss_agg_mode=mode, config=actor)


def off_policy(mask, seed=1):
    """log-probs (leaf) and old log-probs whose ratios reach past the clip range."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(mask.shape, generator=gen) * 3).requires_grad_()
    return logp, logp.detach() + (0.5 * torch.randn(mask.shape, generator=gen)).clamp(-1, 1)


def reference(rule, logp, old, scores, mask, uids, order, norm=True):
    """grpo_ba's aggregate of `rule` on the same batch, groups contiguous, on verl's advantages."""
    adv = verl_grpo(scores, mask, uids, norm)[1][order]
    token_loss = clipped_token_loss(logp[order], old[order], adv, mask[order], EPS_LOW, EPS_HIGH)
    return AGGREGATORS[rule](token_loss, mask[order], adv, G)


# =====================================================================================
# Exact, for each rule: one mini-batch, then verl's data parallelism and micro-batches
# =====================================================================================


@pytest.mark.parametrize("norm", [True, False], ids=["std-scaling", "no-std-scaling"])
@pytest.mark.parametrize("mode", vb.LOSS_AGG_MODES)
@pytest.mark.parametrize("estimator", list(vb.ESTIMATORS))
def test_verls_policy_loss_with_the_estimators_advantages_equals_grpo_bas_aggregate(verl_base_config, estimator,
                                                                                    mode, norm):
    cfg = trainer_config(verl_base_config, prompts=4, estimator=estimator, mode=mode, norm=norm)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    rescaled, returns = core_algos.get_adv_estimator_fn(estimator)(
        token_level_rewards=scores, response_mask=mask, index=uids, config=cfg.algorithm)
    assert torch.equal(returns, verl_grpo(scores, mask, uids, norm)[0])          # verl's GRPO, as configured
    logp, old = off_policy(mask)
    loss, metrics = verl_policy_loss(cfg, logp, old, rescaled, mask, mode, batch_num_tokens=int(mask.sum()),
                                     global_batch_size=mask.shape[0])
    assert metrics["actor/pg_clipfrac"] > 0.05                                    # clipping is active
    rule = vb.ESTIMATORS[estimator]
    ours = reference(rule, logp, old, scores, mask, uids, order, norm)
    assert loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    (g_verl,), (g_ours,) = torch.autograd.grad(loss, logp), torch.autograd.grad(ours, logp)
    assert torch.allclose(g_verl, g_ours, rtol=1e-5, atol=1e-8) and g_ours.abs().sum() > 0
    for other in set(AGGREGATORS) - {rule}:                                       # the rules differ here
        assert reference(other, logp, old, scores, mask, uids, order, norm).item() != pytest.approx(ours.item(),
                                                                                                    rel=1e-3)


@pytest.mark.parametrize("estimator", ["grpo_token", "grpo_sequence"])
def test_dp_size_two_with_dynamic_micro_batches_is_exact(verl_base_config, estimator):
    """2 ranks (verl's balanced partition), each in micro-batches of unequal row counts (as
    use_dynamic_bsz makes them), each micro-batch loss over the global token count with
    dp_size = 2: the DDP mean of the two ranks' summed gradients is grad J_rule."""
    cfg = trainer_config(verl_base_config, prompts=4, estimator=estimator)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS, seed=5)
    rescaled, _ = core_algos.get_adv_estimator_fn(estimator)(scores, mask, index=uids, config=cfg.algorithm)
    logp, old = off_policy(mask, seed=7)
    lengths = mask.sum(1).long().tolist()
    rank_grads, total_loss, sizes = [], 0.0, []
    for rank_rows in get_seqlen_balanced_partitions(lengths, k_partitions=2, equal_size=True):
        grad = torch.zeros_like(logp)
        for part in get_seqlen_balanced_partitions([lengths[r] for r in rank_rows], k_partitions=3,
                                                   equal_size=False):
            rows = torch.tensor([rank_rows[i] for i in part])
            sizes.append(len(part))
            loss, _ = verl_policy_loss(cfg, logp[rows], old[rows], rescaled[rows], mask[rows], "token-mean",
                                       dp_size=2, batch_num_tokens=int(mask.sum()), global_batch_size=mask.shape[0])
            grad += torch.autograd.grad(loss, logp)[0]
            total_loss += loss.item() / 2
        rank_grads.append(grad)
    assert len(set(sizes)) > 1                                                    # micro-batches of unequal size
    ours = reference(vb.ESTIMATORS[estimator], logp, old, scores, mask, uids, order)
    assert total_loss == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose((rank_grads[0] + rank_grads[1]) / 2, torch.autograd.grad(ours, logp)[0],
                          rtol=1e-5, atol=1e-8)


# =====================================================================================
# verl's own modes against the per-group rules
# =====================================================================================


@pytest.mark.parametrize("lengths, totals_agree", [
    ([[2, 9, 1, 7], [3, 5, 4, 12]], False),                  # group totals 19 and 24
    ([[2, 9, 1, 7], [3, 5, 4, 7]], True),                    # 19 and 19, lengths inside each group differ
])
def test_verls_token_mean_is_the_per_group_token_rule_only_when_group_totals_agree(verl_base_config, lengths,
                                                                                   totals_agree):
    cfg = trainer_config(verl_base_config, prompts=2, estimator="grpo_token")
    scores, mask, uids, order = make_batch([[1, 0, 1, 0], [0, 1, 1, 1]], lengths)
    verl_adv, per_row = verl_grpo(scores, mask, uids)
    logp, old = off_policy(mask)
    pooled, _ = verl_policy_loss(cfg, logp, old, verl_adv, mask, "token-mean", batch_num_tokens=int(mask.sum()))
    per_group = reference("token", logp, old, scores, mask, uids, order)
    rescaled, _ = vb.compute_grpo_token_advantage(scores, mask, uids, config=cfg.algorithm)
    plugged, _ = verl_policy_loss(cfg, logp, old, rescaled, mask, "token-mean", batch_num_tokens=int(mask.sum()))
    assert plugged.item() == pytest.approx(per_group.item(), rel=1e-5, abs=1e-7)   # grpo_token: always per group
    if totals_agree:
        assert pooled.item() == pytest.approx(per_group.item(), rel=1e-5, abs=1e-7)
    else:
        assert abs(pooled.item() - per_group.item()) > 0.01 * abs(per_group.item())


def test_verls_seq_mean_token_mean_is_the_sequence_rule_when_groups_are_equal(verl_base_config):
    """One mini-batch, groups of one size: verl's mean of per-response means is J_seq."""
    cfg = trainer_config(verl_base_config, prompts=4, estimator="grpo_sequence")
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    verl_adv, _ = verl_grpo(scores, mask, uids)
    logp, old = off_policy(mask)
    native, _ = verl_policy_loss(cfg, logp, old, verl_adv, mask, "seq-mean-token-mean",
                                 global_batch_size=mask.shape[0])
    assert native.item() == pytest.approx(reference("sequence", logp, old, scores, mask, uids, order).item(),
                                          rel=1e-5, abs=1e-7)


# =====================================================================================
# The switch and the refusals
# =====================================================================================


def test_verls_compute_advantage_dispatches_each_name_to_its_rule(verl_base_config):
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage
    scores, mask, uids, _ = make_batch(REWARDS, LENGTHS)
    outs = {}
    for estimator in vb.ESTIMATORS:
        cfg = trainer_config(verl_base_config, prompts=4, estimator=estimator)
        data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask},
                                   non_tensors={"uid": uids})
        outs[estimator] = compute_advantage(data, adv_estimator=estimator, config=cfg.algorithm).batch["advantages"]
        direct, _ = vb.rule_advantage(estimator, scores, mask, uids, config=cfg.algorithm)
        assert torch.equal(outs[estimator], direct)
    assert not torch.allclose(outs["grpo_token"], outs["grpo_sequence"])
    assert not torch.allclose(outs["grpo_token"], outs["grpo_balanced"])


def test_verl_use_external_modules_registers_the_three_estimators_in_a_fresh_process():
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "grpo_ba_lab.integrations.verl_balanced",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    code = ("import verl; from verl.trainer.ppo.core_algos import get_adv_estimator_fn; "
            "print(*[get_adv_estimator_fn(n).__module__ for n in ('grpo_token', 'grpo_sequence', 'grpo_balanced')])")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].split() == ["grpo_ba_lab.integrations.verl_balanced"] * 3


def installed_entry_points(tmp_path):
    """A distribution's metadata that declares pyproject.toml's verl.plugins entry points, as
    `pip install` writes it: -> the folder to put on sys.path."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["project"]["entry-points"]["verl.plugins"]
    info = tmp_path / "grpo_ba-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: grpo-ba\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    return str(tmp_path)


@pytest.mark.parametrize("plugins, registered", [("auto", True), ("none", False)])
def test_the_installed_package_is_a_verl_plugin_that_import_verl_loads_by_default(tmp_path, plugins, registered):
    """No VERL_USE_EXTERNAL_MODULES: the entry point alone registers the estimators and the start-up
    check, in a fresh process, unless verl's plugin discovery is off (VERL_USE_EXTERNAL_PLUGINS=none)."""
    env = {key: value for key, value in os.environ.items() if key != "VERL_USE_EXTERNAL_MODULES"}
    env.update(VERL_USE_EXTERNAL_PLUGINS=plugins,
               PYTHONPATH=os.pathsep.join([installed_entry_points(tmp_path), ROOT, os.environ.get("PYTHONPATH", "")]))
    code = ("import verl; from verl.trainer.ppo import core_algos; import verl.utils.config as c; "
            "print(sorted(set(core_algos.ADV_ESTIMATOR_REGISTRY) & {'grpo_token', 'grpo_sequence', 'grpo_balanced'}), "
            "getattr(c.validate_config, 'checks_grpo_ba', False))")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = "['grpo_balanced', 'grpo_sequence', 'grpo_token'] True" if registered else "[] False"
    assert result.stdout.strip().splitlines()[-1] == expected


@pytest.mark.parametrize("estimator", ["grpo_token", "grpo_sequence"])
@pytest.mark.parametrize("key, value, match", [
    ("loss_agg_mode", "seq-mean-token-mean", "loss_agg_mode"),
    ("loss_agg_mode", "seq-mean-token-sum-norm", "loss_agg_mode"),
    ("policy_loss.loss_mode", "gspo", "loss_mode"),
])
def test_a_setting_that_cannot_be_exact_is_refused_in_one_line_naming_the_estimator(verl_base_config, estimator,
                                                                                    key, value, match):
    cfg = trainer_config(verl_base_config, prompts=1, estimator=estimator)
    OmegaConf.update(cfg.actor_rollout_ref.actor, key, value)
    scores, mask, uids, _ = make_batch([[1, 0, 1, 0]], [[2, 4, 1, 3]])
    with pytest.raises(ValueError, match=match) as refused:
        core_algos.get_adv_estimator_fn(estimator)(scores, mask, index=uids, config=cfg.algorithm)
    assert f"adv_estimator={estimator}" in str(refused.value) and "\n" not in str(refused.value)


def test_one_group_token_rule_keeps_verls_advantages_and_sequence_gives_1_over_g_l_times_n(verl_base_config):
    """One group under token-mean: c_i = 1/N for token, so A' = A; c_i = 1/(G L_i) for sequence."""
    scores, mask, uids, order = make_batch([[1, 0, 1, 0]], [[2, 4, 1, 3]])
    verl_adv, per_row = verl_grpo(scores, mask, uids)
    token, _ = vb.compute_grpo_token_advantage(scores, mask, uids,
                                               config=trainer_config(verl_base_config, 1, "grpo_token").algorithm)
    assert torch.allclose(token, verl_adv)
    sequence, _ = vb.compute_grpo_sequence_advantage(
        scores, mask, uids, config=trainer_config(verl_base_config, 1, "grpo_sequence").algorithm)
    lengths = mask.sum(1)
    assert torch.allclose(vb.response_advantages(sequence, mask), per_row * lengths.sum() / (G * lengths))
    zero = torch.zeros(mask.shape)                                   # the two rules at ratio 1, for the record
    assert aggregate_sequence(clipped_token_loss(zero, zero, per_row[order], mask[order]), mask[order],
                              per_row[order], G).item() == pytest.approx(0.0, abs=1e-6)
    assert aggregate_token(clipped_token_loss(zero, zero, per_row[order], mask[order]), mask[order],
                           per_row[order], G).item() != pytest.approx(0.0, abs=1e-3)


# =====================================================================================
# Issue 67: every value the plugin cannot serve is refused before Ray starts
# =====================================================================================


@pytest.mark.parametrize("estimator", ["grpo_balance", "grpo-token", "GRPO_BALANCED", "balanced"])
def test_a_misspelled_estimator_is_refused_by_validate_config_naming_the_key_and_the_accepted_values(
        verl_base_config, estimator):
    """verl.trainer.main_ppo runs validate_config in the driver before Ray starts; a name nobody
    registered used to pass it and fail only once Ray and the models were up."""
    import verl.trainer.main_ppo as main_ppo
    cfg = trainer_config(verl_base_config, 1, estimator)
    with pytest.raises(ValueError) as refused:
        main_ppo.validate_config(config=cfg, use_reference_policy=False, use_critic=False)
    message = str(refused.value)
    assert "\n" not in message and f"algorithm.adv_estimator={estimator!r}" in message
    assert all(name in message for name in ("grpo_token", "grpo_sequence", "grpo_balanced",
                                            "grpo_with_bias_metrics", "grpo", "gae"))


@pytest.mark.parametrize("estimator", ["grpo", "gae", "rloo", "grpo_balanced", "grpo_with_bias_metrics"])
def test_registered_estimators_pass_the_start_check(verl_base_config, estimator):
    vb.validate_trainer_config(trainer_config(verl_base_config, 1, estimator))   # no raise


@pytest.mark.parametrize("estimator, mode, accepted", [
    ("grpo_with_bias_metrics", "token_mean", "one of verl's modes, token-mean, token-sum"),
    ("grpo_balanced", "seq-mean-token-mean", "token-mean (verl's default) or seq-mean-token-sum"),
    ("grpo_token", "tokenmean", "token-mean (verl's default) or seq-mean-token-sum"),
])
def test_a_loss_agg_mode_the_plugin_cannot_serve_is_refused_at_start_naming_the_key_and_accepted_values(
        verl_base_config, estimator, mode, accepted):
    import verl.trainer.main_ppo as main_ppo
    cfg = trainer_config(verl_base_config, 1, estimator, mode=mode)
    with pytest.raises(ValueError) as refused:
        main_ppo.validate_config(config=cfg, use_reference_policy=False, use_critic=False)
    message = str(refused.value)
    assert "\n" not in message and "actor_rollout_ref.actor.loss_agg_mode" in message and accepted in message
    assert repr(mode) in message
