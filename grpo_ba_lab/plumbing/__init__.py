"""plumbing -- what a run is built from and writes to; none of it is the algorithm.

- lm_setup: the toy's tokenizer, tiny Qwen3 and cached warm-up; --model and --dataset loading
- chat_template: prompts through a real tokenizer's chat template, the ids that end a response
- real_data: every --dataset row checked before anything loads; benchmarks: --eval-dataset files
- gguf_models: --model FILE.gguf, converted once; lora: --lora-rank adapters over a frozen base
- rollout_engines: faster samplers for rollout() (--rollout-engine static | paged), same tokens
- run_io: the run directory, metrics.jsonl, checkpoints, resume, device and threads
- training_run: the bookkeeping around grpo_ba.train()'s loop (directory, resume, Ctrl-C, log)
- export: the final policy in Hugging Face format (or its PEFT adapter) with a model card
- report_to: the metrics of metrics.jsonl to TensorBoard, trackio or wandb (--report-to)
- completions: completions.jsonl, each step's responses in the format the diagnosis reads
- run_config: --config FILE (JSON or YAML) into Args fields; provenance (versions, commit, device) in run.json
- errors: SetupError, the one-line error every setup step raises

May import: toy_tasks, verifier, and modules of this package below it (errors and
chat_template import nothing of the project). Never grpo_ba, analysis or integrations:
grpo_ba.py stands on this package, not the other way round.
"""
