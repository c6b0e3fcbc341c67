"""What grpo_ba.py stands on, kept out of its way: the flags (args.py), the policy and the task,
toy or real (task.py), the run on disk, its checkpoints and resume (run.py), and the answer
language the verifier reads (answer_grammar.py). Part of the course: it never imports the lab."""
