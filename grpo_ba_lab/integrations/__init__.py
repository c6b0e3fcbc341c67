"""integrations -- the paper's three aggregation rules and their bias metrics inside other trainers.

- trl_balanced: TRL's GRPOTrainer with any of the three rules, per group and exact
  (AggregationGRPOTrainer with AggregationGRPOConfig(aggregation_rule=...); BalancedGRPOTrainer is
  aggregation_rule="balanced"), or with bias metrics only
- verl_balanced: the three rules as verl advantage estimators (grpo_token, grpo_sequence,
  grpo_balanced), with the bias metrics in verl's logs
- bias_metrics: each rule's share of gradient weight on positive responses and the token rule's
  loss at ratio 1, for one batch (torch only; what diagnose prints and the trainers log)

May import: grpo_ba (the rules themselves, never re-typed) and plumbing; never grpo_ba_lab.analysis.
Only grpo_ba_lab.analysis.diagnose imports this package, and only bias_metrics (no trainer import).
"""
