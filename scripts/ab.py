"""Interleaved timing of whole commands: runs each command once per round, in turn, for N
rounds, and prints each one's median and first quartile. Where hyperfine runs one command's
batch after another's, a machine whose load drifts favours whichever ran in the quieter
minutes; taking turns gives every command the same minutes. Used for the before/after
figures in BENCHMARKS.md (two builds of dlock on one store).
Usage: python3 scripts/ab.py ROUNDS 'CMD ARGS...' 'CMD ARGS...' ...
"""
import shlex
import statistics
import subprocess
import sys
import time


def main():
    rounds = int(sys.argv[1])
    cmds = sys.argv[2:]
    times = [[] for _ in cmds]
    for _ in range(rounds):
        for i, cmd in enumerate(cmds):
            start = time.perf_counter()
            subprocess.run(shlex.split(cmd), stdout=subprocess.DEVNULL, check=False)
            times[i].append(time.perf_counter() - start)
    for cmd, t in zip(cmds, times):
        t.sort()
        print(f"{statistics.median(t) * 1000:7.2f} ms median  {t[len(t) // 4] * 1000:6.2f} ms p25  {cmd}")


if __name__ == "__main__":
    main()
