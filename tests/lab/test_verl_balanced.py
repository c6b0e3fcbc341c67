"""verl's own loss functions with grpo_ba_lab.integrations.verl_balanced compute exactly aggregate_balanced.

Everything on the verl side is verl's code: compute_grpo_outcome_advantage, the registry,
ray_trainer.compute_advantage, compute_policy_loss_vanilla + agg_loss with the
global_batch_info its ppo_loss sets, seqlen_balancing's partitions, Tracking. The
policy is a leaf tensor of log-probabilities, so gradients are compared token by token.
"""
import copy
import itertools
import json
import logging
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
from verl.utils.tracking import Tracking  # noqa: E402

import grpo_ba_lab.integrations.verl_balanced as vb  # noqa: E402
from grpo_ba_lab.integrations.bias_metrics import bias_metrics  # noqa: E402
from grpo_ba import AGGREGATORS, aggregate_balanced, aggregate_token, clipped_token_loss, sign_weights, token_weights  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
G = 4
EPS_LOW, EPS_HIGH = 0.2, 0.28


@pytest.fixture(autouse=True)
def fresh_module_state(monkeypatch):
    monkeypatch.setattr(vb, "_pending", [])
    monkeypatch.setattr(vb, "_warned", set())


def trainer_config(base, prompts, mini_batch_prompts=None, mode="token-mean", norm=True, **actor):
    cfg = copy.deepcopy(base)
    cfg.data.train_batch_size = prompts
    cfg.actor_rollout_ref.rollout.n = G
    a = cfg.actor_rollout_ref.actor
    a.ppo_mini_batch_size = mini_batch_prompts or prompts
    a.ppo_micro_batch_size_per_gpu = 1
    a.loss_agg_mode = mode
    a.clip_ratio_low, a.clip_ratio_high = EPS_LOW, EPS_HIGH
    for key, value in actor.items():
        OmegaConf.update(a, key, value)
    cfg.algorithm.adv_estimator = vb.ESTIMATOR
    cfg.algorithm.norm_adv_by_std_in_grpo = norm
    return cfg


def make_batch(rewards, lengths, seed=0, pad_rows=0):
    """Groups of G in shuffled rows (verl's balance_batch reorders rows before advantages).
    -> token_level_rewards (R, T), response_mask (R, T), uids (R,), contiguous order (R_real,)."""
    rewards, lengths = [r for grp in rewards for r in grp], [n for grp in lengths for n in grp]
    width = max(lengths)
    rows = len(rewards)
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))     # batch row -> contiguous row
    mask = torch.zeros(rows + pad_rows, width)
    scores = torch.zeros(rows + pad_rows, width)
    uids = np.empty(rows + pad_rows, dtype=object)
    for row, c in enumerate(perm.tolist()):
        mask[row, :lengths[c]] = 1
        scores[row, lengths[c] - 1] = rewards[c]                 # verl puts the score on the last response token
        uids[row] = f"prompt{c // G}"
    uids[rows:] = "pad0123"                                      # the v1 trainer's padding rows: no response token
    order = torch.argsort(perm)                                  # contiguous row -> batch row
    return scores, mask, uids, order


def verl_grpo(scores, mask, uids, norm=True):
    adv, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=mask, index=uids,
                                                       norm_adv_by_std_in_grpo=norm)
    return vb.response_advantages(adv, mask)                     # (R,) A_i


def actor_config(cfg):
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def verl_policy_loss(actor, logp, old, advantages, mask, mode, dp_size=1, batch_num_tokens=None,
                     global_batch_size=None, weights=None):
    """compute_policy_loss_vanilla with the global_batch_info verl's ppo_loss sets."""
    actor.global_batch_info.update(dp_size=dp_size, batch_num_tokens=batch_num_tokens,
                                   global_batch_size=global_batch_size, loss_scale_factor=actor.loss_scale_factor)
    return core_algos.compute_policy_loss_vanilla(old_log_prob=old, log_prob=logp, advantages=advantages,
                                                  response_mask=mask.bool(), loss_agg_mode=mode, config=actor,
                                                  rollout_is_weights=weights)


def off_policy(mask, seed=1, spread=1.0):
    """log-probs (leaf) and old log-probs whose ratios reach past the clip range (|log ratio| <= spread)."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(mask.shape, generator=gen) * 3).requires_grad_()
    old = logp.detach() + (0.5 * torch.randn(mask.shape, generator=gen)).clamp(-spread, spread)
    return logp, old


REWARDS = [[1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0]]      # one tied group: A = 0 there
LENGTHS = [[2, 9, 1, 7], [3, 5, 4, 12], [6, 2, 8, 3], [10, 4, 2, 6]]


def reference_balanced(logp, old, scores, mask, uids, order, norm):
    """grpo_ba's J_BA of the same batch, groups contiguous, on verl's advantages."""
    adv = verl_grpo(scores, mask, uids, norm)[order]
    token_loss = clipped_token_loss(logp[order], old[order], adv, mask[order], EPS_LOW, EPS_HIGH)
    return aggregate_balanced(token_loss, mask[order], adv, G)


# =====================================================================================
# Exactness: one mini-batch per batch
# =====================================================================================


@pytest.mark.parametrize("norm", [True, False], ids=["std-scaling", "no-std-scaling"])
@pytest.mark.parametrize("mode", vb.LOSS_AGG_MODES)
def test_verl_policy_loss_with_rescaled_advantages_equals_aggregate_balanced(verl_base_config, mode, norm):
    cfg = trainer_config(verl_base_config, prompts=4, mode=mode, norm=norm)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    balanced, returns = core_algos.get_adv_estimator_fn("grpo_balanced")(
        token_level_rewards=scores, response_mask=mask, index=uids, config=cfg.algorithm)
    # the estimator starts from verl's own GRPO advantages, with or without std scaling as configured
    assert torch.equal(returns, core_algos.compute_grpo_outcome_advantage(scores, mask, uids,
                                                                          norm_adv_by_std_in_grpo=norm)[0])
    logp, old = off_policy(mask)
    actor = actor_config(cfg)
    loss, metrics = verl_policy_loss(actor, logp, old, balanced, mask, mode, batch_num_tokens=int(mask.sum()),
                                     global_batch_size=mask.shape[0])
    assert metrics["actor/pg_clipfrac"] > 0.05                  # clipping is active
    ours = reference_balanced(logp, old, scores, mask, uids, order, norm)
    assert loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    (g_verl,), (g_ours,) = torch.autograd.grad(loss, logp), torch.autograd.grad(ours, logp)
    assert torch.allclose(g_verl, g_ours, rtol=1e-5, atol=1e-8)
    assert g_ours.abs().sum() > 0
    tied = torch.as_tensor(uids == "prompt2")                   # rewards all equal: no loss, no gradient
    assert torch.equal(balanced[tied], torch.zeros_like(balanced[tied])) and g_verl[tied].abs().sum() == 0


def test_verl_grpo_std_is_the_unbiased_one_and_ba_ignores_the_scale(verl_base_config):
    scores, mask, uids, order = make_batch([[1, 1, 0, 0]], [[2, 4, 1, 3]])
    adv = verl_grpo(scores, mask, uids)[order]
    assert torch.allclose(adv, torch.tensor([1, 1, -1, -1]) * 0.8660254, atol=1e-5)   # not +-1
    cfg = trainer_config(verl_base_config, prompts=1)
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    cfg_none = trainer_config(verl_base_config, prompts=1, norm=False)
    unscaled, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg_none.algorithm)
    ratio = balanced.sum(1) / unscaled.sum(1)                    # BA's weights: same direction, scale of A kept
    assert torch.allclose(ratio, torch.full_like(ratio, 0.8660254 / 0.5), rtol=1e-5)


def test_dual_clip_is_kept_term_by_term(verl_base_config):
    """At ratios beyond clip_ratio_c = 3, where the dual clip binds (off by default in
    grpo_ba's clipped term), verl's loss with the rescaled advantages still equals
    sum_it c_i * (verl's own term at A_i)."""
    cfg = trainer_config(verl_base_config, prompts=4)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    balanced, adv = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    logp, old = off_policy(mask, seed=3, spread=3.0)
    old = old - 1.5 * (adv < 0)                                  # push negative-advantage ratios past 3
    actor = actor_config(cfg)
    loss, metrics = verl_policy_loss(actor, logp, old, balanced, mask, "token-mean",
                                     batch_num_tokens=int(mask.sum()))
    assert metrics["actor/pg_clipfrac_lower"] > 0                # the dual clip is active
    c = torch.zeros(mask.shape[0])
    c[order] = vb.balanced_coefficients(mask.sum(1)[order], verl_grpo(scores, mask, uids)[order], G)
    weighted, _ = verl_policy_loss(actor, logp, old, adv, mask, "token-sum", weights=c[:, None].expand_as(mask))
    assert loss.item() == pytest.approx(weighted.item(), rel=1e-5)
    (g1,), (g2,) = torch.autograd.grad(loss, logp), torch.autograd.grad(weighted, logp)
    assert torch.allclose(g1, g2, rtol=1e-5, atol=1e-8)


# =====================================================================================
# verl's splits: data parallelism and micro-batches (exact), mini-batches (estimates)
# =====================================================================================


@pytest.mark.parametrize("mode", vb.LOSS_AGG_MODES)
def test_dp_size_two_with_dynamic_micro_batches_is_exact(verl_base_config, mode):
    """2 ranks (verl's balanced partition), each in micro-batches of unequal row counts (as
    use_dynamic_bsz makes them); each micro-batch loss uses the global token count and
    dp_size = 2; the DDP mean of the two ranks' summed gradients is grad J_BA."""
    cfg = trainer_config(verl_base_config, prompts=4, mode=mode)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS, seed=5)
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    logp, old = off_policy(mask, seed=7)
    actor = actor_config(cfg)
    lengths = mask.sum(1).long().tolist()
    ranks = get_seqlen_balanced_partitions(lengths, k_partitions=2, equal_size=True)
    rank_grads, total_loss, sizes = [], 0.0, []
    for rank_rows in ranks:
        micro = get_seqlen_balanced_partitions([lengths[r] for r in rank_rows], k_partitions=3, equal_size=False)
        grad = torch.zeros_like(logp)
        for part in micro:
            rows = torch.tensor([rank_rows[i] for i in part])
            sizes.append(len(part))
            loss, _ = verl_policy_loss(actor, logp[rows], old[rows], balanced[rows], mask[rows], mode, dp_size=2,
                                       batch_num_tokens=int(mask.sum()), global_batch_size=mask.shape[0])
            grad += torch.autograd.grad(loss, logp)[0]
            total_loss += loss.item() / 2
        rank_grads.append(grad)
    assert len(set(sizes)) > 1                                   # micro-batches of unequal size
    ddp_mean = (rank_grads[0] + rank_grads[1]) / 2
    ours = reference_balanced(logp, old, scores, mask, uids, order, True)
    assert total_loss == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(ddp_mean, torch.autograd.grad(ours, logp)[0], rtol=1e-5, atol=1e-8)


def step_weights(actor, balanced, mask, rows, mode, rows_per_mini_batch):
    """-dLoss/dlogp at ratio 1 of verl's optimizer step on mini-batch `rows` (zero elsewhere)."""
    logp = torch.zeros(mask.shape, requires_grad=True)
    idx = torch.tensor(rows)
    loss, _ = verl_policy_loss(actor, logp[idx], logp[idx].detach(), balanced[idx], mask[idx], mode,
                               batch_num_tokens=int(mask[idx].sum()), global_batch_size=rows_per_mini_batch)
    return -torch.autograd.grad(loss, logp)[0]


def ba_weights(scores, mask, uids, order):
    """BA's weights A_i * c_i of every token, in batch rows: -grad J_BA at ratio 1."""
    target = torch.zeros(mask.shape)
    target[order] = token_weights(mask[order], verl_grpo(scores, mask, uids)[order], G, "balanced")
    return target


def relative_l1(a, b):
    return ((a - b).abs().sum() / b.abs().sum()).item()


FIVE_GROUPS = ([[1, 0, 1, 0], [0, 1, 1, 1], [1, 0, 0, 0], [0, 1, 0, 1], [1, 1, 0, 1]],
               [[2, 9, 1, 7], [3, 5, 4, 12], [6, 2, 8, 3], [10, 4, 2, 6], [1, 11, 5, 3]])


@pytest.mark.slow                                  # starts verl's entry point in a subprocess (no Ray: it stops first)
def test_verls_entry_point_stops_a_refused_config_with_its_one_line_reason_and_no_traceback(tmp_path):
    """Issue 76: `python -m verl.trainer.main_ppo` with a refused config printed Hydra's traceback around
    the reason. Now the reason is the one error line, exit code 2, and no traceback follows it."""
    env = {**os.environ, "PYTHONPATH": ROOT, "VERL_USE_EXTERNAL_MODULES": "grpo_ba_lab.integrations.verl_balanced",
           "HYDRA_FULL_ERROR": "0"}
    done = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo_balanced",
                           "actor_rollout_ref.actor.loss_agg_mode=token-sum",
                           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "hydra.run.dir=" + str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    refused = [line for line in done.stderr.splitlines() if line.startswith(vb.REFUSED_AT_START)]
    assert len(refused) == 1 and "got 'token-sum'" in refused[0]
    assert "Traceback" not in done.stderr and "Error executing job" not in done.stderr
    assert done.stderr.rstrip("\n").splitlines()[-1] == refused[0]          # nothing after it
    with open(os.path.join(ROOT, "docs", "verl.md")) as f:                   # the page shows the line to look for
        (shown,) = [line.strip() for line in f if line.strip().startswith(vb.REFUSED_AT_START)]
    assert shown.endswith(": ...") and refused[0].startswith(shown[:-len("...")])


def test_a_driver_of_your_own_gets_the_refusal_as_a_value_error_not_an_exit(verl_base_config):
    import verl.trainer.main_ppo as main_ppo
    cfg = trainer_config(verl_base_config, prompts=5, mini_batch_prompts=1, mode="token-mean")
    with pytest.raises(ValueError):                                        # outside @hydra.main: no SystemExit
        main_ppo.validate_config(config=cfg, use_reference_policy=False, use_critic=False)


def test_token_mean_with_several_mini_batches_is_refused_at_trainer_start_in_one_line(verl_base_config):
    """verl's entry point (main_ppo.main) validates the config with validate_config before Ray
    starts: the estimator's refusal runs there, before any rollout, and again on a batch."""
    import verl.trainer.main_ppo as main_ppo
    cfg = trainer_config(verl_base_config, prompts=5, mini_batch_prompts=1, mode="token-mean")
    with pytest.raises(ValueError, match="needs one PPO mini-batch per batch, got 5") as refused:
        main_ppo.validate_config(config=cfg, use_reference_policy=False, use_critic=False)
    assert "\n" not in str(refused.value) and "seq-mean-token-sum" in str(refused.value)
    scores, mask, uids, _ = make_batch(*FIVE_GROUPS)
    with pytest.raises(ValueError, match="got 5"):
        vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    for key, value in (("loss_agg_mode", "token-sum"), ("policy_loss.loss_mode", "gspo")):
        bad = trainer_config(verl_base_config, prompts=5)
        OmegaConf.update(bad.actor_rollout_ref.actor, key, value)
        with pytest.raises(ValueError, match=key.split(".")[-1]):
            main_ppo.validate_config(config=bad, use_reference_policy=False, use_critic=False)


def test_five_mini_batches_of_seq_mean_token_sum_average_to_grad_j_ba_and_token_means_did_not(
        verl_base_config, caplog):
    """20 rows, K = 5 mini-batches of 4 (verl's fixed split, shuffle=False). With the weights fixed
    once per batch (seq-mean-token-sum, Z = R), step k's gradient is K times BA's weights on its
    rows, and the 5 steps average to grad J_BA at fixed parameters. The same coefficients under
    token-mean (Z = N, what the estimator did before refusing it) leave each step scaled by N / N_k."""
    cfg = trainer_config(verl_base_config, prompts=5, mini_batch_prompts=1, mode="seq-mean-token-sum")
    scores, mask, uids, order = make_batch(*FIVE_GROUPS, seed=3)
    with caplog.at_level(logging.WARNING, logger=vb.__name__):
        balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    assert "5 PPO mini-batches per batch" in caplog.text
    one_batch = trainer_config(verl_base_config, prompts=5, mode="token-mean")     # K = 1: Z = N
    token_mean, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=one_batch.algorithm)
    target = ba_weights(scores, mask, uids, order)
    actor = actor_config(cfg)
    steps = {"seq-mean-token-sum": [], "token-mean": []}
    for k in range(5):
        rows = list(range(4 * k, 4 * k + 4))
        steps["seq-mean-token-sum"].append(step_weights(actor, balanced, mask, rows, "seq-mean-token-sum", 4))
        steps["token-mean"].append(step_weights(actor, token_mean, mask, rows, "token-mean", 4))
        expected = torch.zeros_like(target)
        expected[rows] = 5 * target[rows]
        assert torch.allclose(steps["seq-mean-token-sum"][-1], expected, rtol=1e-5, atol=1e-7)
    exact = relative_l1(torch.stack(steps["seq-mean-token-sum"]).mean(0), target)
    was = relative_l1(torch.stack(steps["token-mean"]).mean(0), target)
    assert exact < 1e-6 and was > 0.2


def test_seq_mean_token_sum_mini_batches_are_unbiased_over_verls_shuffled_split(verl_base_config):
    """8 rows, K = 2 mini-batches of 4. Over all 70 equally likely first mini-batches (verl's
    shuffle=True), the mean step equals grad J_BA; each step is K times BA's weights on its rows."""
    cfg = trainer_config(verl_base_config, prompts=2, mini_batch_prompts=1, mode="seq-mean-token-sum")
    scores, mask, uids, order = make_batch([[1, 0, 1, 0], [0, 1, 1, 1]], [[2, 9, 1, 7], [3, 5, 4, 12]])
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    target = ba_weights(scores, mask, uids, order)
    actor = actor_config(cfg)
    steps = []
    for rows in itertools.combinations(range(8), 4):
        w = step_weights(actor, balanced, mask, list(rows), "seq-mean-token-sum", rows_per_mini_batch=4)
        expected = torch.zeros_like(target)
        expected[list(rows)] = 2 * target[list(rows)]
        assert torch.allclose(w, expected, rtol=1e-5, atol=1e-7)
        steps.append(w)
    assert relative_l1(torch.stack(steps).mean(0), target) < 1e-5


# =====================================================================================
# Groups: tied, padding, unequal; the refusals
# =====================================================================================


def test_every_group_tied_gives_zero_loss_zero_gradient_and_nan_shares(verl_base_config):
    cfg = trainer_config(verl_base_config, prompts=2)
    scores, mask, uids, _ = make_batch([[1, 1, 1, 1], [0, 0, 0, 0]], [[2, 9, 1, 7], [3, 5, 4, 12]])
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    assert torch.equal(balanced, torch.zeros_like(balanced))
    logp, old = off_policy(mask)
    loss, _ = verl_policy_loss(actor_config(cfg), logp, old, balanced, mask, "token-mean",
                               batch_num_tokens=int(mask.sum()))
    (grad,) = torch.autograd.grad(loss, logp)
    assert loss.item() == 0 and torch.isfinite(grad).all() and grad.abs().sum() == 0
    logged = vb.pending_metrics()
    assert np.isnan(logged["pos_share_balanced"]) and logged["token_loss_at_ratio_one"] == 0


def test_padding_rows_without_tokens_are_not_a_group(verl_base_config):
    """The v1 trainer appends rows with an empty response_mask under one padding uid (a group of
    another size): they get advantage 0 and the loss is J_BA of the real groups."""
    cfg = trainer_config(verl_base_config, prompts=4)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS, pad_rows=2)
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    assert balanced[-2:].abs().sum() == 0
    logp, old = off_policy(mask)
    loss, _ = verl_policy_loss(actor_config(cfg), logp, old, balanced, mask, "token-mean",
                               batch_num_tokens=int(mask.sum()))
    ours = reference_balanced(logp, old, scores, mask, uids, order, True)
    assert loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("key, value, match", [
    ("loss_agg_mode", "seq-mean-token-mean", "loss_agg_mode"),
    ("loss_agg_mode", "token-sum", "loss_agg_mode"),
    ("policy_loss.loss_mode", "gspo", "loss_mode"),
])
def test_unsupported_actor_settings_are_refused_by_name(verl_base_config, key, value, match):
    cfg = trainer_config(verl_base_config, prompts=1)
    OmegaConf.update(cfg.actor_rollout_ref.actor, key, value)
    scores, mask, uids, _ = make_batch([[1, 0, 1, 0]], [[2, 4, 1, 3]])
    with pytest.raises(ValueError, match=match):
        vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)


def test_an_empty_response_in_a_real_group_contributes_nothing_not_even_its_advantage_mass(verl_base_config):
    """rewards [1, 1, 0, 0], lengths [3, 5, 2, 0]: verl's (B, T) advantages are 0 on a row without
    response tokens, so its mass never reaches balanced's sides: the 2-token wrong answer gets
    1 / (G * 2), as in the TRL integration (tests/lab/test_trl_rules.py), and verl's loss is J_BA of
    the group with the empty response left out (tests/course/test_empty_response.py)."""
    cfg = trainer_config(verl_base_config, prompts=1)
    scores, mask, uids, order = make_batch([[1, 1, 0, 0]], [[3, 5, 2, 0]])
    balanced, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    per_row = vb.response_advantages(balanced, mask)[order]
    adv = verl_grpo(scores, mask, uids)[order]
    assert adv.tolist() == pytest.approx([0.866024, 0.866024, -0.866024, 0.0], abs=1e-6)
    assert per_row[2].item() == pytest.approx(adv[2].item() / (G * 2) * 10, rel=1e-6)      # N = 10 tokens
    logp, old = off_policy(mask, seed=4)
    loss, _ = verl_policy_loss(actor_config(cfg), logp, old, balanced, mask, "token-mean", batch_num_tokens=10)
    m = mask[order]
    ours = aggregate_balanced(clipped_token_loss(logp[order], old[order], adv, m, EPS_LOW, EPS_HIGH), m, adv, G)
    assert loss.item() == pytest.approx(ours.item(), rel=1e-5, abs=1e-7)
    logged = vb.pending_metrics()
    assert logged["pos_share_balanced"] == pytest.approx(logged["pos_share_sequence"], rel=1e-6)


def test_groups_of_unequal_size_are_refused(verl_base_config):
    cfg = trainer_config(verl_base_config, prompts=2)
    scores, mask, uids, _ = make_batch([[1, 0, 1, 0], [0, 1, 1, 1]], [[2, 9, 1, 7], [3, 5, 4, 12]])
    uids[np.flatnonzero(uids == "prompt0")[0]] = "prompt1"       # one group of 3, one of 5
    with pytest.raises(ValueError, match="sizes"):
        vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)


# =====================================================================================
# The switch: verl's registry, its compute_advantage, VERL_USE_EXTERNAL_MODULES
# =====================================================================================


def test_verls_compute_advantage_dispatches_to_the_registered_estimator(verl_base_config):
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage
    cfg = trainer_config(verl_base_config, prompts=4)
    scores, mask, uids, _ = make_batch(REWARDS, LENGTHS)
    data = DataProto.from_dict(tensors={"token_level_rewards": scores, "response_mask": mask},
                               non_tensors={"uid": uids})
    out = compute_advantage(data, adv_estimator=cfg.algorithm.adv_estimator, config=cfg.algorithm)
    direct, _ = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    assert torch.equal(out.batch["advantages"], direct)
    assert not torch.allclose(direct, core_algos.compute_grpo_outcome_advantage(scores, mask, uids)[0])


# =====================================================================================
# The bias in verl's logs; the worked example of docs/verl.md
# =====================================================================================


def test_bias_metrics_reach_verls_logger_with_the_values_sign_weights_gives(verl_base_config, tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "log.jsonl"))
    cfg = trainer_config(verl_base_config, prompts=4)
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    tracker = Tracking(project_name="p", experiment_name="e", default_backend="file")
    tracker.log(data={"actor/pg_loss": 0.0}, step=1)
    tracker.log(data={"actor/pg_loss": 0.0}, step=2)                # nothing new since: no bias metrics
    first, second = [json.loads(line)["data"] for line in open(tmp_path / "log.jsonl")]
    adv, m = verl_grpo(scores, mask, uids)[order], mask[order]
    for rule in AGGREGATORS:
        w_pos, w_neg = sign_weights(m, adv, G, rule)
        assert first[f"aggregation/pos_share_{rule}"] == pytest.approx((w_pos.abs() / (w_pos.abs() + w_neg.abs())).item(), rel=1e-5)
    zero = torch.zeros(m.shape)
    drift = aggregate_token(clipped_token_loss(zero, zero, adv, m), m, adv, G).item()
    assert first["aggregation/token_loss_at_ratio_one"] == pytest.approx(drift, rel=1e-5, abs=1e-7)
    assert first["aggregation/pos_share_sequence"] == pytest.approx(0.5, abs=1e-5)
    assert first["aggregation/pos_share_token"] != pytest.approx(0.5, abs=1e-2)
    assert not any(key.startswith("aggregation/") for key in second)


def test_measure_only_estimator_keeps_verls_advantages_and_logs_the_same_bias(verl_base_config):
    cfg = trainer_config(verl_base_config, prompts=4, mode="seq-mean-token-norm")      # any mode: nothing is rescaled
    cfg.algorithm.adv_estimator = vb.MEASURE_ONLY
    scores, mask, uids, order = make_batch(REWARDS, LENGTHS)
    advantages, returns = vb.compute_grpo_advantage_with_bias_metrics(scores, mask, uids, config=cfg.algorithm)
    assert torch.equal(vb.response_advantages(advantages, mask), verl_grpo(scores, mask, uids))
    assert torch.equal(returns, advantages) and torch.equal(advantages, advantages * mask)   # (B, T), as verl's grpo
    measured = vb.pending_metrics()
    vb.compute_grpo_balanced_advantage(scores, mask, uids, config=trainer_config(verl_base_config, prompts=4).algorithm)
    trained = vb.pending_metrics()
    assert measured["pos_share_token"] != pytest.approx(0.5, abs=1e-2)
    # the same four bias metrics; only the estimator that trains a rule names it in two more
    # (balanced's J at ratio 1 is 0 by identity with binary rewards, up to float rounding)
    assert trained.pop("trained_balanced/loss_at_ratio_one") == pytest.approx(0.0, abs=1e-6)
    assert trained == {**measured, "trained_balanced/pos_share": pytest.approx(0.5, abs=1e-6)}


def test_worked_example_of_docs_verl_md(verl_base_config):
    """docs/verl.md: G = 4, rewards [1, 0, 1, 0], lengths [2, 4, 1, 3], token-mean, N = 10."""
    cfg = trainer_config(verl_base_config, prompts=1)
    scores, mask, uids, order = make_batch([[1, 0, 1, 0]], [[2, 4, 1, 3]])
    balanced, adv = vb.compute_grpo_balanced_advantage(scores, mask, uids, config=cfg.algorithm)
    per_row = vb.response_advantages(balanced, mask)[order]
    assert per_row.tolist() == pytest.approx([1.443373, -0.618589, 1.443373, -0.618589], abs=1e-6)
    logp = torch.zeros(mask.shape)
    actor = actor_config(cfg)
    before, _ = verl_policy_loss(actor, logp, logp, adv, mask, "token-mean", batch_num_tokens=10)
    after, _ = verl_policy_loss(actor, logp, logp, balanced, mask, "token-mean", batch_num_tokens=10)
    assert before.item() == pytest.approx(0.346410, abs=1e-6) and after.item() == pytest.approx(0.0, abs=1e-6)
    assert vb.pending_metrics() == pytest.approx({"pos_share_token": 0.3, "pos_share_sequence": 0.5,
                                                  "pos_share_balanced": 0.5,
                                                  "token_loss_at_ratio_one": 0.346410,
                                                  "trained_balanced/pos_share": 0.5,        # the rule that trains
                                                  "trained_balanced/loss_at_ratio_one": 0.0}, abs=1e-5)
    assert bias_metrics(verl_grpo(scores, mask, uids)[order], mask.sum(1)[order], G)["pos_share_token"] == \
        pytest.approx(0.3, abs=1e-6)
