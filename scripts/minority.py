"""Before/after timing of `dlock run NAME -- true` and `dlock lock NAME` on one quorum, taking
turns (as scripts/ab.py does), for the frozen-member table of BENCHMARKS.md (issue 41).
`lock` is timed alone: each is followed by an untimed `unlock` with its token, so the next
round finds the name free. The name is used once by every build first, so that each member
keeps its marker (a name's first use with a member frozen waits for it: the amnesia rule).
The stores are any dlock takes: five Redis servers, or one etcd cluster by its three endpoints
(scripts/minority starts both and freezes the members).
Usage: python3 scripts/minority.py ROUNDS 'LABEL=DLOCK' ... -- --store URL --store URL ...
"""
import statistics
import subprocess
import sys
import time


def timed(argv):
    start = time.perf_counter()
    out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    took = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)}: exit {out.returncode}")
    return took, out.stdout.strip()


def main():
    rounds = int(sys.argv[1])
    split = sys.argv.index("--")
    builds = [b.split("=", 1) for b in sys.argv[2:split]]
    stores = sys.argv[split + 1:]
    name = "minority-bench"
    for _, dlock in builds:
        timed([dlock, *stores, "run", name, "--", "true"])
    times = {(label, what): [] for label, _ in builds for what in ("run -- true", "lock")}
    for _ in range(rounds):
        for label, dlock in builds:
            took, _ = timed([dlock, *stores, "run", name, "--", "true"])
            times[(label, "run -- true")].append(took)
            took, token = timed([dlock, *stores, "lock", name])
            times[(label, "lock")].append(took)
            timed([dlock, *stores, "unlock", name, "--token", token])
    for (label, what), t in times.items():
        t.sort()
        print(f"{label:8} {what:12} median {statistics.median(t) * 1000:8.2f} ms"
              f"  p25 {t[len(t) // 4] * 1000:8.2f} ms  max {t[-1] * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
