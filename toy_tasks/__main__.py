"""python -m toy_tasks: the toy's problems and its corpus's answers, scored (the code:
grpo_ba_kit/toy_tasks/__main__.py; installed: python -m grpo_ba_kit.toy_tasks)."""
from grpo_ba_kit.toy_tasks.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m toy_tasks"))
