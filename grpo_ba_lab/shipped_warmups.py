"""Make a design's shipped warm-up: train it from scratch, write it under toy_tasks/warmups/.

The demo starts from a warm-up shipped in the repository, so that its step 0 is the same
on every machine (a warm-up of hundreds of steps ends elsewhere on another CPU, or with
another thread count: docs/toy-designs.md). This is the path that made it, kept so anyone can:

    python -m grpo_ba_lab.shipped_warmups demo 22    # writes toy_tasks/warmups/demo-s22.safetensors

A design with a band (`demo`) trains the lab's band warm-up (plumbing/band_warmup.py: stopped
at the first check inside the band), one without (`demo-v2`) the plain warm-up. It prints the
file's sha256; register it and the warm-up's step-0 statistics in toy_tasks/designs.py
(`shipped`, `step0`). On another machine the file comes out different (that is the point of
shipping it), so a new file means a new registration.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch

import grpo_ba
from grpo_ba_lab import lab_args
from grpo_ba_lab.plumbing import lm_setup
from grpo_ba_lab import designs
from toy_tasks.model import save_warmup_file


def make(name: str, seed: int, out: str = "", log=print) -> tuple[str, str]:
    """Train design `name`'s warm-up for `seed` from scratch; returns (path, sha256)."""
    variant = designs.VARIANTS[designs.variant_of(name, seed) or "native-2t"]
    torch.set_num_threads(variant["threads"])
    with tempfile.TemporaryDirectory() as cache:           # never a cached warm-up
        args = lab_args.parse_args(["--design", name, "--seed", str(seed), "--warmup-from-scratch",
                                    "--cache-dir", cache])
        model, _, _ = lm_setup.toy_warmup(args, log, score=grpo_ba.greedy_accuracy)
        path = out or designs.warmup_path(name, seed)
        sha256 = save_warmup_file(model, path)
    log(f"wrote {path}, sha256 {sha256}")      # the warm-up's own lines said where it stopped
    return path, sha256


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_ba_lab.shipped_warmups",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("design")
    parser.add_argument("seed", type=int)
    parser.add_argument("--out", default="", help="where the file goes (default: "
                        "toy_tasks/warmups/DESIGN-sSEED.safetensors)")
    args = parser.parse_args(argv)
    path, sha256 = make(args.design, args.seed, args.out)
    print(json.dumps({"file": os.path.basename(path), "sha256": sha256}, indent=2))
    print("register it in toy_tasks/designs.py with its step-0 statistics "
          "(grpo_ba_lab.analysis.toy_consequences.step0_statistics measures them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
