"""The paper's three aggregation rules inside verl, per group and exact, from one install and one
config key; and the bias in verl's logs.

    pip install /path/to/grpo-ba                   # a verl.plugins entry point (pyproject.toml)
    python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo_balanced ...     # or grpo_token, grpo_sequence

`import verl` loads every installed "verl.plugins" entry point (verl's default,
VERL_USE_EXTERNAL_PLUGINS=auto), in the driver and in every Ray worker; from a clone that is
not installed, VERL_USE_EXTERNAL_MODULES=grpo_ba_lab.integrations.verl_balanced with the clone
on PYTHONPATH does the same. (verl logs a plugin that fails to import at DEBUG level only: an
"Unknown advantage estimator" error then means this module did not load.) Importing it
registers three advantage estimators (verl's `register_adv_est`), one per rule of grpo_ba
(docs/method.md §2-§5), each applied per group of G = rollout.n responses, then averaged
over the P groups of the batch:

    grpo_token      J_tok = mean_p (1 / sum_i L_i) sum_i sum_t l_it     DAPO's paper's token mean, per group
    grpo_sequence   J_seq = mean_p (1 / G) sum_i (1 / L_i) sum_t l_it   original GRPO
    grpo_balanced   J_BA  (docs/method.md §4)                           Balanced Aggregation

and "grpo_with_bias_metrics": verl's GRPO unchanged, with the bias metrics below in its
logs. verl's own `loss_agg_mode=token-mean` pools tokens over the whole batch: it equals
grpo_token only when every group has the same total length (tests/lab/test_verl_rules.py
shows both cases); docs/trainer-names.md maps every loss_agg_mode to its formula. Nothing
else in a GRPO recipe changes. docs/verl.md has the config lines and a worked example.

How, without copying verl's code. Each estimator computes verl's own GRPO advantages
(`core_algos.compute_grpo_outcome_advantage`: its unbiased std, its epsilon, its
`algorithm.norm_adv_by_std_in_grpo`), then multiplies each response's advantage by
s_i = c_i * Z, where c_i = dJ_rule/dl_it is the rule's coefficient of response i
(grpo_ba.aggregation_coefficients over whole groups, constant along a response for the
three rules) and Z undoes the normaliser of the actor's `loss_agg_mode`:

    token-mean (verl's default)  verl: loss = sum_it l_it / N_mb,  N_mb = response tokens of the mini-batch
                                 Z = N, the response tokens of the whole batch
    seq-mean-token-sum           verl: loss = sum_it l_it / R_mb,  R_mb = ppo_mini_batch_size * rollout.n rows
                                 Z = R, the rows of the whole batch

verl's clipped term (`compute_policy_loss_vanilla`, dual clip included) is positively
homogeneous in the advantage: l_it(s * A) = s * l_it(A) for s > 0 (every branch,
min, max and the `advantages < 0` test, keeps its choice). So, with one mini-batch
per batch (N_mb = N, R_mb = R), verl's loss is sum_it c_i * l_it(A_i) = J_rule exactly,
term by term, at any ratio; verl's micro-batches (fixed or dynamic size) and data
parallelism (`dp_size` times the local sum over the global token count, then the DDP
mean) only split that sum. Tests: tests/lab/test_verl_balanced.py and
tests/lab/test_verl_rules.py, through verl's own functions.

Config keys, checked at trainer start (verl's `validate_config`, which verl.trainer.main_ppo
runs in the driver before Ray starts; wrapped below) and again on every batch; anything else is
refused with a ValueError naming the key and the accepted values, in one line:

    algorithm.adv_estimator                        grpo_token, grpo_sequence, grpo_balanced or
                                                   grpo_with_bias_metrics (or an estimator verl has
                                                   registered in the driver: a misspelled name such as
                                                   grpo_balance is refused at start, not after Ray starts)
    actor_rollout_ref.actor.loss_agg_mode          token-mean (default) or seq-mean-token-sum
                                                   (grpo_with_bias_metrics: any of verl's five modes)
    actor_rollout_ref.actor.policy_loss.loss_mode  vanilla (default)
    actor_rollout_ref.actor.ppo_mini_batch_size    token-mean: = data.train_batch_size (one mini-batch);
                                                   seq-mean-token-sum: any
    actor_rollout_ref.actor.use_dynamic_bsz        either: micro-batching never changes the result
    algorithm.norm_adv_by_std_in_grpo              either: advantages with or without std scaling

Mini-batches. verl makes K = rows / (ppo_mini_batch_size * rollout.n) optimizer steps
per batch (times ppo_epochs); the coefficients are computed once, over the whole
batch, so step k's gradient is

    token-mean:          (N / N_k) * sum over its rows of c_i * grad sum_t l_it(A_i)
    seq-mean-token-sum:   K        * sum over its rows of c_i * grad sum_t l_it(A_i)

- K = 1: both are exactly grad J_rule of the batch, whatever ppo_epochs (the coefficients
  depend only on lengths and advantages, so they stay right as the ratio moves).
- K > 1, seq-mean-token-sum: the weights of whole groups are fixed once per batch, as the TRL
  integration fixes them once per generation batch. With verl's fixed split (actor.shuffle=False,
  its default) the K steps average to grad J_rule at fixed parameters; with shuffle=True each step
  is an unbiased estimate of it. A one-time warning says K.
- K > 1, token-mean: refused. N / N_k depends on which rows a mini-batch drew, so the step
  would be a ratio estimate (27% off grad J_BA in relative L1, averaged over the 5 steps of a
  20-row batch: tests/lab/test_verl_balanced.py). The refusal names both ways out.

Groups are verl's `uid` groups, wherever their rows lie (verl's balance_batch reorders
rows before advantages are computed). Every group with at least one response token
must have the same size G (rollout.n). A group of G responses none of which has a response
token (every one masked as overlong, say) counts in P with loss 0, as grpo_ba and the TRL
integration count it (docs/method.md §7, choice 6). Rows without tokens that are not such
a group (verl's synthetic padding: one uid named "pad" + 32 hex digits, or any empty uid
group whose size is not G) are not a group: they get advantage 0 and do not count in P.

The bias in verl's logs. Each call computes, from bias_metrics.bias_metrics on the batch's
response lengths and verl's GRPO advantages (before the rescaling), the numbers
`python -m grpo_ba_lab.analysis.diagnose` prints:

    pos_share_token, pos_share_sequence, pos_share_balanced   share of each rule's gradient weight at
                                                              ratio 1 on positive-advantage responses
    token_loss_at_ratio_one                                   J_tok at ratio 1: its drift (docs/method.md §3)

and verl's `Tracking.log` (console, W&B, TensorBoard, MLflow, ...: whatever
`trainer.logger` names) adds them to the step's metrics, averaged over the calls since
the last log. grpo_token, grpo_sequence and grpo_balanced add two whose names say which rule
trains: aggregation/trained_<rule>/pos_share and aggregation/trained_<rule>/loss_at_ratio_one
(J_rule at ratio 1; grpo_with_bias_metrics, which trains verl's own GRPO, adds neither). verl's own critic/advantages/* then show the rescaled advantages, and
critic/returns/* verl's GRPO advantages before the rescaling.

Tested with verl 0.9.1 (installed with --no-deps: its metadata pins transformers<5.11
and tensordict<=0.10, this project runs transformers 5.24 and tensordict 0.15.3;
requirements/verl.txt), torch 2.13, on CPU. Limits:
- use_kl_loss and entropy_coeff: verl adds those terms with its own agg_loss after the
  advantage enters, so they keep verl's aggregation; the policy-gradient term is the rule's.
- policy_loss.loss_mode other than vanilla (gspo, sapo, cispo, ...): refused.
- loss_agg_mode seq-mean-token-mean, token-sum, seq-mean-token-sum-norm: refused.
- a multi-trajectory agent loop (several outputs per session in one uid) is grouped by
  uid like any other custom estimator in verl; it is not GRPO's per-session grouping.
"""
from __future__ import annotations

import functools
import logging
import re
import sys
from collections import OrderedDict

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.utils import config as verl_config
from verl.utils import tracking

from grpo_ba import aggregation_coefficients, mask_from_lengths
from grpo_ba_lab.integrations.bias_metrics import METRICS, bias_metrics, loss_at_ratio_one

ESTIMATORS = {"grpo_token": "token", "grpo_sequence": "sequence", "grpo_balanced": "balanced"}   # name -> rule
VERL_LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                       "seq-mean-token-sum-norm")       # verl 0.9.1's agg_loss
PADDING_UID = re.compile(r"pad[0-9a-f]{32}")            # verl's padding_utils: f"pad{uuid.uuid4().hex}"
ESTIMATOR = "grpo_balanced"
MEASURE_ONLY = "grpo_with_bias_metrics"      # verl's GRPO unchanged, the bias in its logs
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum")
METRIC_PREFIX = "aggregation/"               # verl's namespaced metrics: aggregation/pos_share_token, ...

logger = logging.getLogger(__name__)
_warned: set = set()
_pending: list[dict[str, float]] = []        # bias metrics of the batches since the last Tracking.log


# =====================================================================================
# Groups and coefficients
# =====================================================================================


def uid_groups(index, lengths, estimator=ESTIMATOR):
    """Rows of each group, contiguous: (order (R_groups,), group size G).

    Groups are verl's uids in order of first appearance, rows in batch order. Groups with a
    response token must have one size G (refused otherwise). A uid group of G rows without any
    response token is a group (it counts in P with loss 0: docs/method.md §7, choice 6, as in
    grpo_ba and the TRL integration); verl's padding (a uid matching PADDING_UID, or an empty
    uid group of another size) is left out."""
    rows: OrderedDict = OrderedDict()
    for row, uid in enumerate(np.asarray(index, dtype=object).tolist()):
        rows.setdefault(uid, []).append(row)
    with_tokens = [members for members in rows.values() if float(lengths[members].sum()) > 0]
    sizes = sorted({len(members) for members in with_tokens})
    if len(sizes) > 1:
        raise ValueError(f"{estimator} needs groups of one size (rollout.n); this batch has uid groups of sizes "
                         f"{sizes}: the rules' weights are per group of G responses (docs/method.md §5)")
    group_size = sizes[0] if sizes else 1
    groups = [members for uid, members in rows.items()
              if float(lengths[members].sum()) > 0
              or (len(members) == group_size and not PADDING_UID.fullmatch(str(uid)))]
    order = torch.tensor([row for members in groups for row in members], dtype=torch.long)
    return order, group_size


def rule_coefficients(lengths, advantages, group_size, rule):
    """c_i = dJ_rule/dl_it for every response of contiguous groups: (B,) lengths, (B,) advantages -> (B,)."""
    mask = mask_from_lengths(lengths.float())                                      # only lengths matter
    advantages = advantages.float() * (lengths > 0)          # no tokens, no mass (verl's (B, T) advantages say 0)
    coefficients = aggregation_coefficients(mask, advantages, group_size, rule)    # (B, T)
    return coefficients[:, 0]                                                      # constant along a response


def balanced_coefficients(lengths, advantages, group_size):
    """c_i = dJ_BA/dl_it: rule_coefficients of "balanced"."""
    return rule_coefficients(lengths, advantages, group_size, "balanced")


def response_advantages(advantages, response_mask):
    """verl's (B, T) advantages, A_i * mask_it, -> (B,) A_i (0 for a row without response tokens)."""
    first = response_mask.float().argmax(dim=1, keepdim=True)                     # first response token
    values = advantages.gather(1, first).squeeze(1)
    return torch.where(response_mask.sum(dim=1) > 0, values, torch.zeros_like(values))


# =====================================================================================
# The trainer config verl passes in (config=self.config.algorithm, a node of the whole config)
# =====================================================================================


def trainer_config(config):
    """The whole trainer config above `algorithm`, or None where verl passed no DictConfig node."""
    root = getattr(config, "_get_root", None)
    root = root() if callable(root) else None
    return root if root is not None and "actor_rollout_ref" in root else None


def mini_batches_per_batch(root, rows=None):
    """K, verl's optimizer steps per batch and epoch: rows / (ppo_mini_batch_size * rollout.n), with
    rows = data.train_batch_size * rollout.n when the batch is not at hand (at trainer start)."""
    group = int(root.actor_rollout_ref.rollout.get("n", 1))
    rows_per_mini_batch = int(root.actor_rollout_ref.actor.ppo_mini_batch_size) * group
    if rows is None:
        rows = int(root.data.train_batch_size) * group
    return max(rows // rows_per_mini_batch, 1) if rows_per_mini_batch > 0 else 1


def check_trainer_config(root, rows=None, estimator=ESTIMATOR):
    """-> (loss_agg_mode, mini-batches per batch K). Raises ValueError, in one line naming the key,
    on what cannot be exact. Called at trainer start (verl's validate_config, below) and again on
    every batch (a driver of your own may skip validate_config)."""
    actor = root.actor_rollout_ref.actor
    mode = actor.get("loss_agg_mode", "token-mean")
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.actor.loss_agg_mode=token-mean "
                         f"(verl's default) or seq-mean-token-sum, got {mode!r}: it rescales advantages against the "
                         "normaliser of those two modes, and refuses verl's others (seq-mean-token-mean, token-sum, "
                         "seq-mean-token-sum-norm) (grpo_ba_lab/integrations/verl_balanced.py)")
    loss_mode = (actor.get("policy_loss") or {}).get("loss_mode", "vanilla")
    if loss_mode != "vanilla":
        raise ValueError(f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.actor.policy_loss.loss_mode="
                         f"vanilla (verl's default), got {loss_mode!r}: the rules weigh the clipped token term "
                         "(docs/method.md §1)")
    mini_batches = mini_batches_per_batch(root, rows)
    if mini_batches > 1 and mode == "token-mean":
        raise ValueError(f"algorithm.adv_estimator={estimator} with loss_agg_mode=token-mean needs one PPO mini-batch "
                         f"per batch, got {mini_batches} (actor_rollout_ref.actor.ppo_mini_batch_size="
                         f"{actor.ppo_mini_batch_size}, data.train_batch_size={root.data.train_batch_size}): token-mean "
                         "divides each mini-batch by its own token count, which moves the rule's weights; set "
                         "ppo_mini_batch_size = data.train_batch_size, or loss_agg_mode=seq-mean-token-sum, whose "
                         "mini-batches keep the weights fixed once per batch (docs/verl.md)")
    if mini_batches > 1:
        _warn_once(("mini-batches", mini_batches), f"{estimator}: {mini_batches} PPO mini-batches per batch: the rule's "
                   "weights are fixed once per batch and each optimizer step applies them, times "
                   f"{mini_batches}, to its own rows: over verl's split (actor.shuffle) an unbiased estimate of "
                   f"grad J_{ESTIMATORS.get(estimator, 'rule')}, and the {mini_batches} steps average to it at fixed "
                   "parameters; ppo_mini_batch_size = data.train_batch_size makes each step exact (docs/verl.md)")
    return mode, mini_batches


def accepted_estimators():
    """The adv_estimator values verl can run here: this module's four first, then verl's own and
    any other estimator registered in this process."""
    ours = [*ESTIMATORS, MEASURE_ONLY]
    verl = [e.value for e in core_algos.AdvantageEstimator] + sorted(core_algos.ADV_ESTIMATOR_REGISTRY)
    return ours + [name for name in dict.fromkeys(verl) if name not in ours]


def check_estimator_name(estimator):
    """Refuse, in one line naming the key and the accepted values, an adv_estimator nobody registered
    (a misspelled grpo_balance would otherwise fail only after Ray and the models have started)."""
    accepted = accepted_estimators()
    if estimator not in accepted:
        raise ValueError(f"algorithm.adv_estimator={estimator!r} is not a registered advantage estimator: "
                         f"this plugin serves {', '.join(accepted[:4])}; verl's own: {', '.join(accepted[4:])} "
                         "(grpo_ba_lab/integrations/verl_balanced.py)")


def check_loss_agg_mode_name(root, estimator):
    """grpo_with_bias_metrics runs with any of verl's modes: refuse another value by name."""
    mode = root.actor_rollout_ref.actor.get("loss_agg_mode", "token-mean")
    if mode not in VERL_LOSS_AGG_MODES:
        raise ValueError(f"algorithm.adv_estimator={estimator} needs actor_rollout_ref.actor.loss_agg_mode to be one "
                         f"of verl's modes, {', '.join(VERL_LOSS_AGG_MODES)}; got {mode!r}")


def validate_trainer_config(config):
    """Refuse at trainer start, in one line, an adv_estimator no one registered, and a config in
    which this module's estimator named by algorithm.adv_estimator cannot run or be exact."""
    estimator = config.algorithm.get("adv_estimator") if "algorithm" in config else None
    if estimator is None:
        return
    estimator = getattr(estimator, "value", estimator)           # an AdvantageEstimator member
    check_estimator_name(estimator)
    if estimator in ESTIMATORS:
        check_trainer_config(config, None, estimator)
    elif estimator == MEASURE_ONLY and "actor_rollout_ref" in config:
        check_loss_agg_mode_name(config, estimator)


REFUSED_AT_START = "grpo_ba_lab.integrations.verl_balanced refused the config:"


def _under_hydra_main() -> bool:
    """Is a @hydra.main task running (verl.trainer.main_ppo)? A driver of your own that calls
    validate_config gets the ValueError instead."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:
        return False
    return HydraConfig.initialized()


def _validating_grpo_ba(validate):
    """verl's validate_config (its start-up check of the trainer config, in the driver, before Ray
    starts and any worker is built), followed by validate_trainer_config."""
    @functools.wraps(validate)
    def validate_config(config, *args, **kwargs):
        try:
            validate_trainer_config(config)
        except ValueError as refused:
            if _under_hydra_main():             # verl.trainer.main_ppo: the reason, not Hydra's traceback around it
                print(f"{REFUSED_AT_START} {refused}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None   # not an Exception: Hydra lets it through, and prints nothing more
            raise
        return validate(config, *args, **kwargs)
    validate_config.checks_grpo_ba = True
    return validate_config


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


# =====================================================================================
# The estimator
# =====================================================================================


def rule_advantage(estimator, token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                   norm_adv_by_std_in_grpo=None):
    """verl's GRPO advantages times s_i = c_i * Z for the rule of `estimator` (a key of ESTIMATORS):
    verl's token-mean (or seq-mean-token-sum) of the clipped terms is then J_rule (module
    docstring). Returns (advantages, returns), both (B, T); returns are verl's GRPO advantages."""
    rule = ESTIMATORS[estimator]
    if index is None:
        raise ValueError(f"{estimator} needs verl's group ids (the batch's 'uid'), got none")
    rows = response_mask.shape[0]
    root = trainer_config(config)
    if root is not None:
        mode, _ = check_trainer_config(root, rows, estimator)
    else:
        mode = "token-mean"
        _warn_once("no-config", f"{estimator}: no trainer config reached the estimator, so the actor's settings "
                                "were not checked; assuming loss_agg_mode=token-mean and one mini-batch per batch")
    advantages = _verl_grpo(token_level_rewards, response_mask, index, config, epsilon, norm_adv_by_std_in_grpo)
    lengths, per_response, order, group_size = _record_bias(advantages, response_mask, index, estimator, rule)
    scale = torch.zeros(rows)                                                      # s_i; 0 off the real groups
    if order.numel() > 0:
        scale[order] = rule_coefficients(lengths[order], per_response[order], group_size, rule)
    scale = scale * (lengths.sum() if mode == "token-mean" else float(rows))       # Z = N or R
    rescaled = advantages * scale.to(device=advantages.device, dtype=advantages.dtype)[:, None]
    return rescaled, advantages


@core_algos.register_adv_est("grpo_balanced")
def compute_grpo_balanced_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                                    norm_adv_by_std_in_grpo=None, **kwargs):
    """Balanced Aggregation (docs/method.md §2, §4) through verl's loss: rule_advantage of grpo_balanced."""
    return rule_advantage("grpo_balanced", token_level_rewards, response_mask, index, config, epsilon,
                          norm_adv_by_std_in_grpo)


@core_algos.register_adv_est("grpo_token")
def compute_grpo_token_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                                 norm_adv_by_std_in_grpo=None, **kwargs):
    """The per-group token mean (DAPO's paper; docs/method.md §2), averaged over groups, through
    verl's loss: rule_advantage of grpo_token. Not verl's token-mean, which pools the batch."""
    return rule_advantage("grpo_token", token_level_rewards, response_mask, index, config, epsilon,
                          norm_adv_by_std_in_grpo)


@core_algos.register_adv_est("grpo_sequence")
def compute_grpo_sequence_advantage(token_level_rewards, response_mask, index=None, config=None, epsilon=1e-6,
                                    norm_adv_by_std_in_grpo=None, **kwargs):
    """The sequence mean per group (original GRPO; docs/method.md §2), averaged over groups, through
    verl's loss: rule_advantage of grpo_sequence."""
    return rule_advantage("grpo_sequence", token_level_rewards, response_mask, index, config, epsilon,
                          norm_adv_by_std_in_grpo)


@core_algos.register_adv_est(MEASURE_ONLY)
def compute_grpo_advantage_with_bias_metrics(token_level_rewards, response_mask, index=None, config=None,
                                             epsilon=1e-6, norm_adv_by_std_in_grpo=None, **kwargs):
    """verl's GRPO advantages, unchanged (any loss_agg_mode), and the batch's bias metrics in
    verl's logs: measure how biased a plain GRPO run's aggregation is before switching to
    grpo_balanced. Returns (advantages, returns) as verl's grpo estimator does."""
    if index is None:
        raise ValueError(f"{MEASURE_ONLY} needs verl's group ids (the batch's 'uid'), got none")
    advantages = _verl_grpo(token_level_rewards, response_mask, index, config, epsilon, norm_adv_by_std_in_grpo)
    _record_bias(advantages, response_mask, index)
    return advantages, advantages


def _verl_grpo(token_level_rewards, response_mask, index, config, epsilon, norm_adv_by_std_in_grpo):
    """verl's own GRPO advantages (B, T), with algorithm.norm_adv_by_std_in_grpo unless given."""
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo, config=config)
    return advantages


def trained_metric_names(rule):
    """The two metrics that name the rule being trained: (its share, its loss at ratio 1)."""
    return f"trained_{rule}/pos_share", f"trained_{rule}/loss_at_ratio_one"


def _record_bias(advantages, response_mask, index, estimator=MEASURE_ONLY, rule=None):
    """Keep the batch's bias metrics for the next Tracking.log (and, for a rule's estimator, the
    trained rule's share and loss at ratio 1). -> (B,) lengths L_i, (B,) A_i, the rows of the
    groups in contiguous order, and the group size G."""
    mask = response_mask.detach().float().cpu()
    lengths = mask.sum(dim=1)                                                      # (B,) L_i
    per_response = response_advantages(advantages.detach().float().cpu(), mask)     # (B,) A_i
    order, group_size = uid_groups(index, lengths, estimator)
    if order.numel() > 0:
        metrics = bias_metrics(per_response[order], lengths[order], group_size)
        if rule is not None:
            share, loss = trained_metric_names(rule)
            metrics[share] = metrics[f"pos_share_{rule}"]
            metrics[loss] = loss_at_ratio_one(per_response[order] * (lengths[order] > 0),
                                              mask_from_lengths(lengths[order]), group_size, rule)
        _pending.append(metrics)
    return lengths, per_response, order, group_size


# =====================================================================================
# The bias of each batch, in verl's logs
# =====================================================================================


def pending_metrics(clear=True) -> dict[str, float]:
    """Mean of the bias metrics of the batches since the last call (NaN-aware; {} if none)."""
    if not _pending:
        return {}
    out = {}
    keys = [*METRICS, *dict.fromkeys(key for m in _pending for key in m if key not in METRICS)]
    for key in keys:
        values = torch.tensor([m[key] for m in _pending if key in m], dtype=torch.float64)
        finite = values[~values.isnan()]
        out[key] = finite.mean().item() if finite.numel() else float("nan")
    if clear:
        _pending.clear()
    return out


def _log_with_bias_metrics(log):
    @functools.wraps(log)
    def logging_bias(self, data, step, backend=None):
        extra = {f"{METRIC_PREFIX}{key}": value for key, value in pending_metrics().items()}
        return log(self, {**data, **extra} if extra else data, step, backend=backend)
    logging_bias.adds_bias_metrics = True
    return logging_bias


if not getattr(tracking.Tracking.log, "adds_bias_metrics", False):
    tracking.Tracking.log = _log_with_bias_metrics(tracking.Tracking.log)

# Refusals at start: verl's entry point (verl.trainer.main_ppo.main) validates the config with
# verl.utils.config.validate_config before Ray starts; the rules' checks run there too. This module
# is imported while `import verl` runs (a verl.plugins entry point, or VERL_USE_EXTERNAL_MODULES),
# before main_ppo binds the name; a main_ppo imported earlier is updated as well.
if not getattr(verl_config.validate_config, "checks_grpo_ba", False):
    verl_config.validate_config = _validating_grpo_ba(verl_config.validate_config)
_main_ppo = sys.modules.get("verl.trainer.main_ppo")
if _main_ppo is not None and not getattr(getattr(_main_ppo, "validate_config", None), "checks_grpo_ba", False):
    _main_ppo.validate_config = verl_config.validate_config
