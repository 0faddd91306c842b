"""Interleaved timing of whole commands: runs each command once per round, in turn, for N
rounds, and prints each one's median and first quartile. Where hyperfine runs one command's
batch after another's, a machine whose load drifts favours whichever ran in the quieter
minutes; taking turns gives every command the same minutes. Used for the before/after
figures in BENCHMARKS.md (two builds of dlock on one store).
A `{n}` in a command is replaced by a new value every time it runs (`queue/{n}`: a name never
used before, as in the README's work-queue recipe).
Usage: python3 scripts/ab.py ROUNDS 'CMD ARGS...' 'CMD ARGS...' ...
"""
import itertools
import secrets
import shlex
import statistics
import subprocess
import sys
import time


def main():
    rounds = int(sys.argv[1])
    cmds = sys.argv[2:]
    times = [[] for _ in cmds]
    fresh = (f"{secrets.token_hex(4)}-{i}" for i in itertools.count())
    for _ in range(rounds):
        for i, cmd in enumerate(cmds):
            argv = [a.replace("{n}", next(fresh)) if "{n}" in a else a for a in shlex.split(cmd)]
            start = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)
            times[i].append(time.perf_counter() - start)
    for cmd, t in zip(cmds, times):
        t.sort()
        print(f"{statistics.median(t) * 1000:7.2f} ms median  {t[len(t) // 4] * 1000:6.2f} ms p25  {cmd}")


if __name__ == "__main__":
    main()
