"""python -m toy_tasks [--design NAME] [--problems N] [--seed S]

What the toy asks and what its warm-up corpus answers, each answer scored by the reward
training uses (the verifier), and the start RL forces on some responses."""
import argparse
import random

from grpo_ba_kit.analysis.toy_consequences import design_args
from grpo_ba_kit.plumbing.lm_setup import toy_world
from grpo_ba_kit.toy_tasks import designs
from grpo_ba_kit.verifier import verify


class _ForcedAlways:
    """A random source whose draw always forces: shows the start RL would force on a prompt."""
    @staticmethod
    def random() -> float:
        return 0.0


def show(design: str, problems: int, seed: int) -> list[str]:
    world, rng = toy_world(design_args(design)), random.Random(seed)    # what `--design` trains in
    lines = [f"design {design}: {world}", ""]
    for _ in range(problems):
        a, c, d = rng.randint(10, 99), rng.randint(1, 9), rng.randint(1, 9)
        prompt = f"{a}+{c}+{d}="
        forced = world.forced_prefix(prompt, _ForcedAlways())
        forcing = "RL forces nothing"
        if forced:
            forcing = f"RL forces the start {forced!r} on {world.force_frac:.0%} of responses"
        lines.append(f"{prompt:<9} gold {a + c + d}; the corpus slips here "
                     f"{world.slip_rate(prompt):.0%} of the time; {forcing}")
        for _ in range(3):
            response = world.response(prompt, rng)
            reward = verify(response, str(a + c + d))
            tokens = len(response) + 1                          # a token a character, and EOS
            lines.append(f"    reward {reward:.0f}  {tokens:>2} tokens  {response}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toy_tasks",
                                     description=__doc__.split("\n\n")[1])
    parser.add_argument("--design", default=designs.DEMO, help="whose world (default: %(default)s)",
                        choices=[designs.NO_DESIGN, *designs.DESIGNS])
    parser.add_argument("--problems", type=int, default=4, help="how many (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="draws them (default: %(default)s)")
    args = parser.parse_args(argv)
    print("\n".join(show(args.design, args.problems, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
