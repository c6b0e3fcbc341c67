"""plumbing -- what a lab run is built from and writes to, beyond the course's own
(grpo_ba_support/task.py, grpo_ba_support/run.py); none of it is the algorithm.

- lm_setup: the lab's `build`: the toy world from --regime/--gap-size/..., any warm-up, .gguf, data
- real_data: every --dataset row checked before anything loads; benchmarks: --eval-dataset files
- gguf_models: --model FILE.gguf, converted once; lora: --lora-rank adapters over a frozen base
- rollout_engines: other samplers for train(sample=...) (--rollout-engine static | paged)
- training_run: the lab's loggers (provenance, data report, trackers, completions, export)
- export: the final policy in Hugging Face format (or its PEFT adapter) with a model card
- report_to: the metrics of metrics.jsonl to TensorBoard, trackio or wandb (--report-to)
- completions: completions.jsonl, each step's responses in the format the diagnosis reads
- run_config: --config FILE (JSON or YAML) into LabArgs fields; provenance in run.json
- run_dirs: which runs a folder holds, finished or not, for the sweeps and reports

May import the course and modules of this package. Never grpo_ba.py's analysis or
integrations: the studies stand on this package, not the other way round.
"""
