"""toy_tasks -- the toy arithmetic world, seen from the top of a clone.

    python -m toy_tasks                   # a few of the demo's problems, answered the corpus's ways
    python -m toy_tasks --design loop-gap

The code is grpo_ba_kit/toy_tasks/ (arithmetic.py: the world, worked examples in its
docstring; designs.py: the named designs of docs/toy-designs.md). This package is not
installed, so an install adds no name as common as `toy_tasks` (grpo_ba_kit/__init__.py);
`import toy_tasks` from a clone gives the same objects as `import grpo_ba_kit.toy_tasks`.
"""
import grpo_ba_kit.toy_tasks as _package
from grpo_ba_kit.toy_tasks import *  # noqa: F401,F403  (the package's __all__)
from grpo_ba_kit.toy_tasks import designs

__all__ = [*_package.__all__, "designs"]
