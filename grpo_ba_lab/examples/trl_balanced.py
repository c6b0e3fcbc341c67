"""BalancedGRPOTrainer, two steps, on a tiny Qwen3 built here (nothing is downloaded), with
verifier.py as the reward and the rollouts dumped for the bias diagnosis (docs/trl.md).

    pip install -r requirements.txt -r requirements/trl.txt        # or: pip install .[trl]
    python -m grpo_ba_lab.examples.trl_balanced                       # from the clone's top folder
    python -m grpo_ba_lab.analysis.diagnose rollouts.jsonl --figure bias.png

The rule is a config field (AggregationGRPOConfig.aggregation_rule, "balanced" by default), so
TRL's saved config and trackers record it.
"""
import os

from datasets import Dataset
from grpo_ba_lab.integrations.trl_balanced import AggregationGRPOConfig, BalancedGRPOTrainer, dump_rollouts
from toy_tasks.model import char_tokenizer, tiny_qwen3
from verifier import verify


def correct(completions, answer, **kwargs):       # TRL passes the dataset's other columns by name
    return [verify(completion, gold) for completion, gold in zip(completions, answer)]


ROLLOUTS = "rollouts.jsonl"
if os.path.exists(ROLLOUTS):
    os.remove(ROLLOUTS)                           # dump_rollouts appends: one run per file here
tokenizer = char_tokenizer()                      # one token per character of the toy's digits
model = tiny_qwen3(tokenizer)                     # ~130k parameters, random weights
data = Dataset.from_dict({"prompt": ["1+1=", "2+3=", "4+4=", "3+3="],
                         "answer": ["2", "5", "8", "6"]})
config = AggregationGRPOConfig(output_dir="trl_balanced_run", aggregation_rule="balanced", num_generations=4,
                               per_device_train_batch_size=8, max_completion_length=8, max_steps=2,
                               use_cpu=True, report_to="none", save_strategy="no", logging_steps=1)
trainer = BalancedGRPOTrainer(model=model, processing_class=tokenizer, args=config,
                              train_dataset=data,
                              reward_funcs=dump_rollouts(correct, ROLLOUTS, num_generations=4))
trainer.train()
print(f"wrote {ROLLOUTS}: python -m grpo_ba_lab.analysis.diagnose {ROLLOUTS} --figure bias.png")
