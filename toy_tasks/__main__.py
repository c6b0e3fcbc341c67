"""python -m toy_tasks [--design NAME] [--problems N] [--seed S]

What the toy asks and what its warm-up corpus answers, each answer scored by the reward
training uses (the verifier), and the start RL forces on some responses."""
import argparse
import random

from toy_tasks import designs, make_problems


class _ForcedAlways:
    """A random source whose draw always forces: shows the start RL would force on a prompt."""
    @staticmethod
    def random() -> float:
        return 0.0


def show(design: str, problems: int, seed: int) -> list[str]:
    """A design's world, then `problems` held-out problems with three corpus answers each."""
    from verifier import verify
    world, rng = designs.world(design), random.Random(seed)          # what `--design` trains in
    lines = [f"design {design}: {world}", ""]
    for row in make_problems(seed)[1].select(range(problems)):             # held-out problems
        prompt, gold = row["prompt"], row["answer"]
        forced = world.forced_prefix(prompt, _ForcedAlways())
        forcing = "RL forces nothing"
        if forced:
            forcing = f"RL forces the start {forced!r} on {world.force_frac:.0%} of responses"
        lines.append(f"{prompt:<9} gold {gold}; the corpus slips here "
                     f"{world.slip_rate(prompt):.0%} of the time; {forcing}")
        for _ in range(3):
            response = world.response(prompt, rng)
            tokens = len(response) + 1                          # a token a character, and EOS
            lines.append(f"    reward {verify(response, gold):.0f}  {tokens:>2} tokens  {response}")
    return lines


def main(argv=None, prog: str = "python -m toy_tasks") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[1])
    parser.add_argument("--design", default=designs.DEMO, help="whose world (default: %(default)s)",
                        choices=[designs.NO_DESIGN, *designs.DESIGNS])
    parser.add_argument("--problems", type=int, default=4, help="how many (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="draws them (default: %(default)s)")
    args = parser.parse_args(argv)
    print("\n".join(show(args.design, args.problems, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
