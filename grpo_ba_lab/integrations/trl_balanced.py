"""The paper's three aggregation rules inside TRL's GRPOTrainer, per group and exact; the bias in TRL's logs.

    from grpo_ba_lab.integrations.trl_balanced import AggregationGRPOConfig, AggregationGRPOTrainer
    from transformers.utils import is_torch_bf16_gpu_available
    config = AggregationGRPOConfig(output_dir="run", aggregation_rule="token",   # any GRPOConfig field too
                                   bf16=is_torch_bf16_gpu_available())   # TRL's default bf16=True needs a bf16 GPU
    trainer = AggregationGRPOTrainer(model=model, reward_funcs=my_reward, args=config, train_dataset=dataset)

(`model`, `my_reward` and `dataset` are yours: anything GRPOTrainer takes; then `trainer.train()`.
tests/lab/test_practitioner_snippets.py runs this block on a tiny model, on the machine at hand:
on a CPU machine the second line turns TRL's default bf16 off, which transformers would refuse.) The rule is a
config field, `aggregation_rule`, one of grpo_ba's three rules (docs/method.md §2-§5), each
applied per group of G responses and then averaged over the P groups of the generation batch:

    "token"     J_tok = mean_p (1 / sum_i L_i) sum_i sum_t l_it    DAPO's paper's token mean, per group
    "sequence"  J_seq = mean_p (1 / G) sum_i (1 / L_i) sum_t l_it  original GRPO
    "balanced"  J_BA  (docs/method.md §4)                          Balanced Aggregation; the default

`BalancedGRPOTrainer` is `AggregationGRPOTrainer` held to `aggregation_rule="balanced"`. TRL's own `dapo` pools
tokens over the whole batch (sum_it l_it / N): it equals "token" only when every group has
the same total length (tests/lab/test_trl_rules.py shows both cases); docs/trainer-names.md
maps every TRL loss_type to its formula.

How, without copying TRL's code. The clipped term is positively homogeneous in the
advantage: for s > 0, -min(rho * sA, clip(rho) * sA) = s * l_it(A). So any per-response
weighting can be moved into the advantages. With `loss_type="dapo"` TRL computes

    loss = sum_it l_it(A'_i) / N,      N = completion tokens of the whole generation batch

(`num_items_in_batch`, gathered over processes). Setting A'_i = A_i * c_i * N, where
c_i = dJ_rule/dl_it is the rule's coefficient of response i computed by
grpo_ba.aggregation_coefficients over whole groups (constant along a response for all
three rules), makes TRL's loss equal J_rule = sum_it c_i * l_it(A_i) exactly, term by
term, at any ratio (tests: tests/lab/test_trl_balanced.py, tests/lab/test_trl_rules.py).
TRL's advantages (its reward scaling, its std) are kept; the coefficients of sequence and
token do not depend on the advantages, balanced's not on how a group's advantages are scaled.
The lengths L_i are TRL's loss mask: completion_mask times tool_mask where TRL has one.

The bias in TRL's logs. Every generation batch logs, into TRL's own metrics (console,
TensorBoard, W&B, trackio: wherever `report_to` sends them), the numbers
`python -m grpo_ba_lab.analysis.diagnose` prints, from bias_metrics.bias_metrics on the batch's
gathered lengths and TRL's advantages (before the rescaling):

    pos_share_token, pos_share_sequence, pos_share_balanced   share of each rule's gradient weight at
                                                              ratio 1 on positive-advantage responses
    token_loss_at_ratio_one                                   J_tok at ratio 1: its drift (docs/method.md §3)

`AggregationGRPOTrainer` logs them, whatever its rule, and two more whose names say which rule it
trains: aggregation/trained_<rule>/pos_share (that rule's share) and
aggregation/trained_<rule>/loss_at_ratio_one (J_rule at ratio 1), e.g. aggregation/trained_balanced/pos_share.
For the plain trainer (any loss_type) use `GRPOTrainerWithBiasMetrics`, or mix `BiasMetricsMixin`
into your own subclass: `class MyTrainer(BiasMetricsMixin, GRPOTrainer)`; they log no trained_* metric
(TRL's own loss_type trains, none of the three rules).

Several processes (DDP, e.g. `accelerate launch` or `torchrun`). TRL lays the global
generation batch out process after process, groups contiguous, and a group may span
two processes. Lengths and advantages are gathered, the coefficients computed over
the global batch, and each process keeps its slice; N is already global in TRL. The
DDP average over processes then gives exactly grad J_rule of the global batch (test:
tests/lab/test_trl_multiprocess.py, 2 processes on CPU with gloo, each rule).

Gradient accumulation (GA) and steps_per_generation (spg). TRL generates one
generation batch of per_device_train_batch_size x spg rows per process, shuffles
it, splits it into spg slices and feeds one slice per micro-step; an optimizer step
accumulates GA slices. The coefficients are computed once over the whole generation
batch, before the split (as grpo_ba's micro-batching: choice 8 in grpo_ba.py), and
dapo divides each slice by N * GA / spg, so

    gradient of one optimizer step = (spg / GA) * sum over the rows of its GA slices of c_i * grad sum_t l_it(A_i)

- GA = spg (TRL's default: spg defaults to GA): one optimizer step per generation
  batch, and its gradient is exactly grad J_rule of that batch.
- spg > GA: spg / GA optimizer steps per generation batch. Each sees a random part
  of the rows (shuffled before the split), weighted as in J_rule of the *whole*
  generation batch and scaled by spg / GA: over the shuffle, an unbiased estimate of
  grad J_rule at the sampling parameters, the same treatment dapo gives its token mean.
  Groups are not kept together.
- spg < GA: GA / spg generation batches per optimizer step, each with its own
  coefficients; the step's gradient is the mean of their grad J_rule (same formula).
- num_iterations (mu) > 1 reuses the same advantages; the coefficients depend only
  on lengths and advantages, so they stay right as the ratio moves.
GA settings are tested in tests/lab/test_trl_balanced.py and tests/lab/test_trl_rules.py.

Your run's rollouts for `python -m grpo_ba_lab.analysis.diagnose`: wrap the reward function,
`reward_funcs=dump_rollouts(my_reward, "rollouts.jsonl", num_generations=8)`, in a trainer
with the bias metrics (AggregationGRPOTrainer, BalancedGRPOTrainer, GRPOTrainerWithBiasMetrics
or your BiasMetricsMixin subclass; a plain GRPOTrainer is refused at the first batch, in one
line; num_generations may be left out, it is then the trainer's, and one unlike the trainer's is refused
at start, in one line). It returns the same rewards and appends one {"group", "reward", "length", "step", "run",
"adv_scale", "std", "eps"} line per completion (one file per process with several processes:
concatenate them). `length` is the completion's tokens in TRL's loss mask (0 for a completion
masked by mask_truncated_completions; tool results left out), and adv_scale / std / eps say
how TRL computed the advantages (scale_rewards "group" -> "std", "none" -> "none", "batch" -> "batch";
multi_objective_aggregation "normalize_then_sum" -> "normalize_then_sum"; TRL's unbiased std, eps 1e-4),
so diagnose computes TRL's advantages, not its own, or refuses in one line the two it cannot compute. `run` is one id
per trainer run, the same on every process, so runs appended to one file are never read as
one batch. Runnable examples: grpo_ba_lab/examples/trl_balanced.py, and
grpo_ba_lab/examples/trl_three_rules.py (the paper's comparison: the three rules from one start).

Tested with trl 1.16.0 (transformers 5.24, accelerate 1.15); the [trl] extra allows
trl>=1.16,<2. The trainer reads TRL's generation batch, a private layout a later 1.x may
change: then it stops naming the missing keys (`check_trl_batch`). Refused in one line
(they cannot be exact): a loss_type other than dapo (grpo, bnpo, dr_grpo normalise per
micro-batch or by a constant; cispo, sapo, vespo, luspo change the token term), and
importance_sampling_level="sequence". The other GRPOConfig fields that change TRL's loss beside
the advantage, each checked against TRL's own loss for each rule (tests/lab/test_trl_loss_settings.py;
docs/trl.md, "TRL's settings that change the loss"):
- delta, epsilon, epsilon_high: inside the clipped term, still a multiple of A: exact.
- beta > 0: TRL adds beta * KL_it (times the ratio under use_bias_correction_kl) *after* the
  advantage enters, so the KL term keeps TRL's dapo aggregation (token mean over the batch);
  the policy-gradient term is the rule's.
- entropy_coef, use_adaptive_entropy: minus coef * the micro-batch's token-mean entropy, beside the rule.
- off_policy_mask_threshold: drops negative responses far off policy; the others keep the
  weights the rule gave them on the whole batch (no renormalisation).
- top_entropy_quantile < 1 drops tokens from the terms, not from the lengths: the rule
  is applied to TRL's masked terms.
- vllm_importance_sampling_correction (use_vllm): each token's term times TRL's ratio.
- router_aux_loss_coef (Mixture-of-Experts only): the router's loss added beside; not tested.
"""
from __future__ import annotations

import json
import time
import uuid
import warnings
from dataclasses import dataclass, field

from trl import GRPOConfig, GRPOTrainer

from grpo_ba import AGGREGATORS, aggregation_coefficients, mask_from_lengths
from grpo_ba_lab.integrations.bias_metrics import bias_metrics

RULES = tuple(AGGREGATORS)                     # ("token", "sequence", "balanced"): grpo_ba's rules
METRIC_PREFIX = "aggregation/"                 # TRL-style namespaced metrics: aggregation/pos_share_token, ...


def check_rule(rule, where="AggregationGRPOTrainer"):
    """Refuse, in one line, a rule grpo_ba does not define."""
    if rule not in RULES:
        raise ValueError(f"{where}: aggregation_rule must be one of {', '.join(map(repr, RULES))} "
                         f"(grpo_ba's aggregation rules, docs/method.md), got {rule!r}")
    return rule


def rule_coefficients(lengths, advantages, group_size, rule):
    """c_i = dJ_rule/dl_it for every response of a batch: (B,) lengths, (B,) advantages -> (B,).
    A response without loss tokens (L_i = 0: mask_truncated_completions, tool-only) contributes
    nothing, its advantage mass included (docs/trl.md, "Empty responses")."""
    mask = mask_from_lengths(lengths.float())                                      # only lengths matter
    advantages = advantages.float() * (lengths > 0)                                # no tokens, no mass
    coefficients = aggregation_coefficients(mask, advantages, group_size, check_rule(rule))  # (B, T)
    return coefficients[:, 0]                                                      # constant along a response


def balanced_coefficients(lengths, advantages, group_size):
    """c_i = dJ_BA/dl_it: rule_coefficients of "balanced"."""
    return rule_coefficients(lengths, advantages, group_size, "balanced")


def rule_advantages(advantages, completion_mask, num_items_in_batch, group_size, rule, gather=None,
                    process_index=0, all_lengths=None, all_advantages=None):
    """A'_i = A_i * c_i * N: TRL's dapo loss with these advantages is J_rule.

    advantages: (B_local,), completion_mask: (B_local, T) of this process (TRL's loss mask);
    `gather` concatenates a (B_local,) tensor over processes (accelerator.gather), or None.
    all_lengths / all_advantages: the gathered (B_global,) tensors, if already gathered.
    """
    lengths = completion_mask.sum(dim=1).float()                                   # (B_local,)
    if all_lengths is None:
        all_lengths = gather(lengths) if gather else lengths                       # (B_global,)
        all_advantages = gather(advantages.float()) if gather else advantages.float()
    per_response = rule_coefficients(all_lengths, all_advantages, group_size, rule)   # (B_global,)
    local = slice(process_index * lengths.numel(), (process_index + 1) * lengths.numel())
    return advantages * per_response[local].to(advantages.dtype) * num_items_in_batch.to(advantages.dtype)


def balanced_advantages(advantages, completion_mask, num_items_in_batch, group_size, **kwargs):
    """A'_i = A_i * c_i * N with Balanced Aggregation's c_i: rule_advantages of "balanced"."""
    return rule_advantages(advantages, completion_mask, num_items_in_batch, group_size, "balanced", **kwargs)


# =====================================================================================
# The bias of each generation batch, in TRL's metrics
# =====================================================================================


def _group_size(trainer) -> int:
    return trainer.num_generations if trainer.model.training else trainer.num_generations_eval


# What this module reads from the dict TRL's _generate_and_score_completions returns.
TRL_BATCH_KEYS = ("advantages", "completion_mask", "num_items_in_batch")


def check_trl_batch(output):
    """Refuse, in one line, a TRL whose generation batch lacks what the rescaling reads."""
    missing = [key for key in TRL_BATCH_KEYS if key not in output]
    if missing:
        import trl
        raise RuntimeError(f"trl {trl.__version__}'s generation batch has no {', '.join(missing)}: "
                           "grpo_ba_lab.integrations.trl_balanced is tested with trl 1.16 "
                           "(pip install 'trl>=1.16,<2')")


def loss_mask(output):
    """(B_local, T) TRL's loss mask: completion_mask, times tool_mask where TRL has one
    (tool results are in the completion but not in the loss, nor in dapo's N)."""
    mask = output["completion_mask"]
    return mask * output["tool_mask"] if output.get("tool_mask") is not None else mask


def gathered_lengths_and_advantages(trainer, output):
    """(B_global,) response lengths (loss tokens) and TRL's advantages, in TRL's global row order."""
    check_trl_batch(output)
    lengths = loss_mask(output).sum(dim=1).float()                                  # (B_local,)
    advantages = output["advantages"].float()
    if trainer.accelerator.num_processes > 1:
        return trainer.accelerator.gather(lengths), trainer.accelerator.gather(advantages)
    return lengths, advantages


def trained_metric_names(rule):
    """The two metrics that name the rule being trained: (its share, its loss at ratio 1)."""
    return f"{METRIC_PREFIX}trained_{rule}/pos_share", f"{METRIC_PREFIX}trained_{rule}/loss_at_ratio_one"


def log_bias_metrics(trainer, lengths, advantages):
    """Append diagnose.bias_metrics of one generation batch to TRL's metrics; TRL averages
    them over the logging window. Every process holds the same gathered batch, hence the same values.
    A trainer of one of the three rules (`trainer.rule`) also logs trained_metric_names(rule)."""
    mode = "train" if trainer.model.training else "eval"
    group_size = _group_size(trainer)
    metrics = bias_metrics(advantages, lengths, group_size)
    for name, value in metrics.items():
        trainer._metrics[mode][f"{METRIC_PREFIX}{name}"].append(value)   # NaN (no signal) is skipped by TRL's log
    rule = getattr(trainer, "rule", None)
    if rule in RULES:
        share, loss = trained_metric_names(rule)
        trainer._metrics[mode][share].append(metrics[f"pos_share_{rule}"])
        trainer._metrics[mode][loss].append(rule_loss_at_ratio_one(advantages, lengths, group_size, rule))


def rule_loss_at_ratio_one(advantages, lengths, group_size, rule):
    """J_rule at ratio 1 on the batch, empty responses contributing nothing (bias_metrics' choice)."""
    from grpo_ba_lab.integrations.bias_metrics import loss_at_ratio_one
    lengths = lengths.detach().float().cpu()
    return loss_at_ratio_one(advantages.detach().float().cpu() * (lengths > 0), mask_from_lengths(lengths),
                             group_size, rule)


def dump_writers(trainer):
    """The dump_rollouts wrappers among the trainer's reward functions."""
    return [func for func in getattr(trainer, "reward_funcs", []) if getattr(func, "dumps_rollouts", False)]


class BiasMetricsMixin:
    """Mix into a GRPOTrainer subclass: logs the bias metrics of every generation batch, and
    lets dump_rollouts write each completion's length as TRL's loss mask counts it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if dump_writers(self) and len(self.reward_funcs) > 1:
            raise ValueError("dump_rollouts records the rewards of the one function it wraps, but TRL's advantages "
                             f"come from all {len(self.reward_funcs)} reward functions: combine them into one function "
                             "and wrap that, or dump without the others")
        for writer in dump_writers(self):
            writer.attach(self)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        write_dumped_rollouts(self, output)
        log_bias_metrics(self, *gathered_lengths_and_advantages(self, output))
        return output


def write_dumped_rollouts(trainer, output):
    """Write the lines the dump_rollouts wrappers hold for this batch, with the loss mask's lengths;
    an evaluation's batch (the model in eval mode) trains nothing, so its lines are dropped."""
    writers = dump_writers(trainer)
    if writers and not getattr(getattr(trainer, "model", None), "training", True):
        for writer in writers:
            writer.discard()
        return
    if writers:
        check_trl_batch(output)
        lengths = loss_mask(output).sum(dim=1).tolist()                    # this process's rows, TRL's order
        for writer in writers:
            writer.write(lengths)


class GRPOTrainerWithBiasMetrics(BiasMetricsMixin, GRPOTrainer):
    """TRL's GRPOTrainer, unchanged, plus pos_share_* and token_loss_at_ratio_one in its logs."""


def check_loss_settings(loss_type, importance_sampling_level, where):
    """Refuse, in one line, the TRL settings under which no rule can be exact."""
    if loss_type != "dapo":
        raise ValueError(f"{where} needs loss_type='dapo' (TRL's default), got {loss_type!r}: the rules rescale "
                         "advantages against dapo's normaliser, the only one fixed per generation batch")
    if importance_sampling_level != "token":
        raise ValueError(f"{where} supports importance_sampling_level='token' only, got "
                         f"{importance_sampling_level!r}: grpo_ba's rules weigh token terms")


@dataclass
class AggregationGRPOConfig(GRPOConfig):
    r"""
    TRL's [`GRPOConfig`] with one more field: the aggregation rule of grpo_ba that
    [`AggregationGRPOTrainer`] applies, per group (docs/method.md §2-§5). Being a field, the rule is
    recorded wherever TRL records its config (`training_args.bin` in every checkpoint, the
    `args` TensorBoard, W&B, trackio and MLflow receive) and is set from TRL's YAML or command line
    (`TrlParser`): `aggregation_rule: token`, `--aggregation_rule token`.

    Parameters:
        aggregation_rule (`str`, *optional*, defaults to `"balanced"`):
            `"token"` (the per-group token mean of DAPO's paper), `"sequence"` (original GRPO) or
            `"balanced"` (Balanced Aggregation).

    Refused here, in one line, before any model is built: a `loss_type` other than `"dapo"` and
    `importance_sampling_level="sequence"`. Warned: `steps_per_generation >
    gradient_accumulation_steps`, under which an optimizer step sees part of a generation batch.
    """

    aggregation_rule: str = field(
        default="balanced",
        metadata={"help": "grpo_ba's aggregation rule, applied per group of num_generations completions: 'token', "
                          "'sequence' or 'balanced' (Balanced Aggregation, arXiv 2605.04077).",
                  "choices": list(RULES)},
    )

    def __post_init__(self):
        check_rule(self.aggregation_rule, "AggregationGRPOConfig")
        check_loss_settings(self.loss_type, self.importance_sampling_level, "AggregationGRPOConfig")
        super().__post_init__()
        if self.steps_per_generation > self.gradient_accumulation_steps:
            warnings.warn(f"AggregationGRPOConfig: steps_per_generation={self.steps_per_generation} > "
                          f"gradient_accumulation_steps={self.gradient_accumulation_steps}, so one generation batch "
                          f"feeds {self.steps_per_generation // self.gradient_accumulation_steps} optimizer steps: "
                          f"each applies the {self.aggregation_rule} rule's weights, fixed once per generation batch, "
                          "to its share of the rows, an unbiased estimate of grad J of the batch, not grad J itself; "
                          "steps_per_generation = gradient_accumulation_steps makes each step exact (docs/trl.md)",
                          stacklevel=3)


def aggregation_config(args, model, name, rule=None):
    """The trainer's AggregationGRPOConfig: `args` itself, or a default one where args is None
    (TRL names its default output_dir after the model). Refuses a plain GRPOConfig in one line."""
    if args is None:
        model_id = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "")
        args = AggregationGRPOConfig(f"{(model_id or 'model').split('/')[-1]}-GRPO",
                                     **({"aggregation_rule": rule} if rule else {}))
    if not isinstance(args, AggregationGRPOConfig):
        raise TypeError(f"{name} needs args=AggregationGRPOConfig(..., aggregation_rule=...), got "
                        f"{type(args).__name__}: the rule is a config field, so config, checkpoints and trackers "
                        "record it (grpo_ba_lab.integrations.trl_balanced)")
    return args


class AggregationGRPOTrainer(BiasMetricsMixin, GRPOTrainer):
    """GRPOTrainer whose policy-gradient loss is one of grpo_ba's rules, per group and exact
    (`args.aggregation_rule` = "token", "sequence" or "balanced"; docs/method.md §2-§5), with the
    bias metrics of each generation batch in its logs. Every argument is GRPOTrainer's; `args`
    must be an AggregationGRPOConfig (default: one with aggregation_rule="balanced")."""

    def __init__(self, model, reward_funcs, args=None, *more, **kwargs):
        name = type(self).__name__
        if "rule" in kwargs:
            raise TypeError(f"{name} takes no rule=: set it in the config, AggregationGRPOConfig("
                            f"aggregation_rule={kwargs['rule']!r}), so the run records it")
        args = aggregation_config(args, model, name, self._fixed_rule())
        if self._fixed_rule() not in (None, args.aggregation_rule):
            raise ValueError(f"{name} is the {self._fixed_rule()} rule, got AggregationGRPOConfig(aggregation_rule="
                             f"{args.aggregation_rule!r}): use AggregationGRPOTrainer for another rule")
        # Checked again here (the config may have changed since it was built), before TRL builds the
        # model, the reference model or a vLLM engine.
        check_rule(args.aggregation_rule, name)
        check_loss_settings(args.loss_type, args.importance_sampling_level, name)
        self.rule = args.aggregation_rule
        super().__init__(model, reward_funcs, args, *more, **kwargs)

    @classmethod
    def _fixed_rule(cls):
        return None

    def _generate_and_score_completions(self, inputs):
        output = super(BiasMetricsMixin, self)._generate_and_score_completions(inputs)   # TRL's, not the mixin's
        write_dumped_rollouts(self, output)
        all_lengths, all_advantages = gathered_lengths_and_advantages(self, output)     # one gather for both uses
        log_bias_metrics(self, all_lengths, all_advantages)                             # TRL's advantages, before
        output["advantages"] = rule_advantages(output["advantages"], loss_mask(output), output["num_items_in_batch"],
                                               _group_size(self), self.rule,
                                               process_index=self.accelerator.process_index,
                                               all_lengths=all_lengths, all_advantages=all_advantages)
        return output


class BalancedGRPOTrainer(AggregationGRPOTrainer):
    """AggregationGRPOTrainer with aggregation_rule="balanced": Balanced Aggregation (docs/method.md §2, §4)."""

    @classmethod
    def _fixed_rule(cls):
        return "balanced"


def new_run_id(num_processes: int) -> str:
    """A trainer run's id: its start time (readable, sortable) and a random suffix (two runs
    started in the same second differ). Every process gets process 0's, so the files of
    one distributed run concatenate into one run."""
    run_id = [f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"]
    if num_processes > 1:
        from accelerate.utils import broadcast_object_list
        broadcast_object_list(run_id, from_process=0)   # all processes score every batch, in step
    return run_id[0]


# TRL's advantages, as dump_rollouts records them for diagnose: TRL 1.16 divides by the unbiased
# std of each group's rewards plus 1e-4 (scale_rewards="group"), or does not divide ("none").
TRL_STD, TRL_EPS = "unbiased", 1e-4
TRL_ADV_SCALE = {"group": "std", "none": "none", "batch": "batch", True: "std", False: "none"}


def trl_adv_scale(args) -> str:
    """How TRL 1.16 scaled the advantages, as diagnose names it: multi_objective_aggregation=
    "normalize_then_sum" standardises each group and then divides by one std of the whole batch, whatever
    scale_rewards says; else scale_rewards "group" -> "std", "none" -> "none", "batch" -> "batch". A value
    this table lacks is written as it is (diagnose then refuses it in one line), never as "std"."""
    if getattr(args, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum":
        return "normalize_then_sum"
    scale = getattr(args, "scale_rewards", "group")
    return TRL_ADV_SCALE.get(scale, str(scale))


def trainer_group_size(trainer):
    """The trainer's num_generations (TRL's trainer attribute, else its config's), or None."""
    size = getattr(trainer, "num_generations", None)
    return size if size is not None else getattr(getattr(trainer, "args", None), "num_generations", None)


def dump_rollouts(reward_func, path, num_generations=None):
    """Wrap a TRL reward function: same rewards, and one {"group", "reward", "length", "step",
    "run", "adv_scale", "std", "eps", "loss_type"[, "aggregation_rule"]} JSON line per completion appended to `path` (`path`.rank<r>
    with several processes), the input of `python -m grpo_ba_lab.analysis.diagnose`.

    Use it in a trainer with BiasMetricsMixin (AggregationGRPOTrainer, BalancedGRPOTrainer,
    GRPOTrainerWithBiasMetrics): the trainer attaches itself and, once TRL has built the batch's
    loss mask, writes the lines. A wrapper no such trainer attached is refused at its first call.

    group = "<generation batch>-<global row // G>", TRL's layout (process after process,
    groups contiguous), so a group split over two processes keeps one id. The reward is
    this function's (with several reward functions TRL trains on their weighted sum);
    length = the completion's tokens in TRL's loss mask (completion_mask times tool_mask:
    up to and including EOS, 0 under mask_truncated_completions for a truncated one, tool
    results left out), the L_i of the loss. step = TRL's global_step when the batch was
    scored. run = one id per trainer run (`new_run_id`): each `train()` starts a new
    TrainerState, and a new state starts a new run with its batches counted from 0, so runs
    appended to one file stay apart. adv_scale, std, eps: TRL's advantages (trl_adv_scale: its
    scale_rewards or normalize_then_sum, its unbiased std, its 1e-4), which diagnose then computes.
    loss_type: TRL's (GRPOConfig.loss_type); aggregation_rule: AggregationGRPOConfig's, where the
    trainer has one: the rule the run trains with, which diagnose's recommendation names.

    num_generations: G, the group size of the ids; left out, it is the trainer's num_generations.
    Given and unlike the trainer's, the trainer refuses it at start, in one line: its group ids
    would cut TRL's groups apart or merge them, and diagnose would read wrong groups.
    """
    from accelerate import PartialState
    state = PartialState()
    target = path if state.num_processes == 1 else f"{path}.rank{state.process_index}"
    run = {"state": None, "id": None, "batch": 0}   # the trainer run being dumped
    held = []                                       # this batch's lines, until the trainer writes them

    def dumping(prompts, completions, completion_ids, **kwargs):
        if dumping.trainer is None:
            raise RuntimeError("dump_rollouts writes each completion's length as TRL's loss mask counts it, which "
                               "only a trainer with the bias metrics knows: use AggregationGRPOTrainer, "
                               "GRPOTrainerWithBiasMetrics or class MyTrainer(BiasMetricsMixin, GRPOTrainer) "
                               "(grpo_ba_lab.integrations.trl_balanced)")
        rewards = reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        trainer_state = kwargs.get("trainer_state")
        if run["id"] is None or trainer_state is not run["state"]:
            run.update(state=trainer_state, id=new_run_id(state.num_processes), batch=0)
        step = run["batch"] if trainer_state is None else trainer_state.global_step
        first_row = state.process_index * len(prompts)
        args = getattr(dumping.trainer, "args", None)
        scale = trl_adv_scale(args)
        # the rule the run trains with, which diagnose's recommendation names: TRL's loss_type, and
        # AggregationGRPOConfig's aggregation_rule where there is one (it then trains, through TRL's dapo)
        trained = {key: getattr(args, key) for key in ("loss_type", "aggregation_rule")
                   if getattr(args, key, None) is not None}
        held.clear()
        for row, reward in enumerate(rewards, start=first_row):
            held.append({"group": f"{run['batch']}-{row // group_size[0]}", "reward": reward, "step": step,
                         "run": run["id"], "adv_scale": scale, "std": TRL_STD, "eps": TRL_EPS, **trained})
        run["batch"] += 1
        return rewards

    group_size = [num_generations]                  # the trainer's, where not given

    def attach(trainer):
        trainers = trainer_group_size(trainer)
        if num_generations is not None and trainers is not None and num_generations != trainers:
            raise ValueError(f"dump_rollouts(num_generations={num_generations}) in a trainer with num_generations="
                             f"{trainers}: its group ids would not be TRL's groups; pass num_generations={trainers} "
                             "or leave it out (it is then the trainer's)")
        if num_generations is None and trainers is None:
            raise ValueError("dump_rollouts: no num_generations given, and the trainer has none to take")
        group_size[0] = num_generations if num_generations is not None else trainers
        dumping.trainer = trainer

    def write(lengths):
        """Append the held lines with `lengths` (this process's rows, in order): the loss mask's L_i."""
        if len(lengths) != len(held):
            raise RuntimeError(f"dump_rollouts holds {len(held)} completions and the batch has {len(lengths)} rows")
        with open(target, "a") as f:
            for line, length in zip(held, lengths):
                keys = ("group", "reward")
                f.write(json.dumps({**{k: line[k] for k in keys}, "length": int(length),
                                    **{k: v for k, v in line.items() if k not in keys}}) + "\n")
        held.clear()

    def discard():
        held.clear()

    dumping.trainer = None
    dumping.dumps_rollouts = True
    dumping.attach, dumping.write, dumping.discard = attach, write, discard
    dumping.__name__ = getattr(reward_func, "__name__", "reward")   # TRL names its reward metrics after it
    return dumping
