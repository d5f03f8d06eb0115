"""What the event journal costs a wolfpack message, in CPU instructions (figure (h) of
engine_bench.py counted instead of timed, so a busy machine does not move it). Prints
figures; asserts nothing. Needs valgrind, so `make bench` leaves it out (the `_`).

    python bench/_journal_callgrind.py              # hash seeds 0 to 2, about 3 minutes
    python bench/_journal_callgrind.py --seeds 1    # seed 0 only

Each figure runs (h)'s loop (engine_bench.bench_wolfpack: publish, deliver, confirm, the
journal drained every 10,000 messages) in a child process under `valgrind --tool=callgrind`
for 2,000 and for 22,000 messages; a message costs the difference over 20,000, so start-up
and imports cancel out. The child's PYTHONHASHSEED is fixed and the engine's random prefix
and journal epoch are made constant, so mids and tags hash alike from run to run (with a
random prefix the figure moved by some 1,000 instructions between runs); the seed moves it
by a few dozen, and the seeds' figures are averaged.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL, BIG = 2_000, 22_000


def child(journal: bool, count: int) -> None:
    """(h)'s loop, once: run under callgrind by `instructions`."""
    import secrets

    secrets.token_hex = lambda n=16: ("5eed" * 8)[: 2 * n]  # the same mids and tags each run
    sys.path.insert(0, HERE)
    from engine_bench import bench_wolfpack

    bench_wolfpack(count, journal)


def instructions(journal: bool, count: int, seed: int) -> int:
    """Instructions of one child run of `count` messages."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        mode = "on" if journal else "off"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--child", mode, str(count)]  # fmt: skip
        env = dict(os.environ, PYTHONHASHSEED=str(seed))
        subprocess.run(command, check=True, env=env, capture_output=True)
        with open(out) as profile:
            found = re.search(r"^(?:summary|totals): (\d+)", profile.read(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"no instruction total in callgrind's output for {command}")
    return int(found.group(1))


def per_message(journal: bool, seed: int) -> float:
    return (instructions(journal, BIG, seed) - instructions(journal, SMALL, seed)) / (BIG - SMALL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="hash seeds 0..N-1 (default 3)")
    parser.add_argument("--child", nargs=2, metavar=("ON_OFF", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0] == "on", int(args.child[1]))
        return
    for mode in (False, True):  # compile the modules first: no run pays for it
        subprocess.run([sys.executable, __file__, "--child", "on" if mode else "off", "10"],
                       check=True)  # fmt: skip
    offs, ons = [], []
    for seed in range(args.seeds):
        offs.append(per_message(False, seed))
        ons.append(per_message(True, seed))
        print(f"seed {seed}: journal off {offs[-1]:,.0f}, on {ons[-1]:,.0f} instructions a "
              f"message ({(ons[-1] / offs[-1] - 1) * 100:+.2f} %)", flush=True)  # fmt: skip
    off, on = statistics.mean(offs), statistics.mean(ons)
    print(f"(h) under callgrind, mean of {args.seeds} seeds: journal off {off:,.0f}, on {on:,.0f} "
          f"instructions a wolfpack message: the journal costs {on - off:,.0f} "
          f"({(on / off - 1) * 100:+.2f} %)")  # fmt: skip


if __name__ == "__main__":
    main()
