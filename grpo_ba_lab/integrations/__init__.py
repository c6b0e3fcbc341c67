"""integrations -- Balanced Aggregation and the bias metrics inside other trainers.

- trl_balanced: TRL's GRPOTrainer with BA (BalancedGRPOTrainer) or with bias metrics only
- verl_balanced: BA as a verl advantage estimator, with the bias metrics in verl's logs

May import: grpo_ba (the rules themselves, never re-typed), grpo_ba_lab.analysis.diagnose (the bias
metrics) and plumbing; nothing in the project imports this package.
"""
