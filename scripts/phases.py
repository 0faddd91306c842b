"""Where one `dlock run x -- true` spends its time, from `strace -f --seccomp-bpf -ttt` traces
of the calls that mark its phases (scripts/bench records them; only those calls stop the
process, so the timing is close to an untraced run). Prints the median of each phase over
the traces given, as a row of a markdown table. Usage: phases.py NAME TRACE...
(`phases.py --header`: the table's header rows.)
"""
import statistics
import sys

PHASES = [
    "start-up (exec to the first store call)",
    "connect, grant (and the watchdog's fork)",
    "the child's fork and exec",
    "the child (`true`)",
    "release and exit",
]


def marks(path):
    """Times (ms from exec) of: dlock's first store call, its fork of the child, the child's
    exec, the child's exit, dlock's exit."""
    lines = [l.split(None, 2) for l in open(path) if l.strip()]
    t0, main = float(lines[0][1]), lines[0][0]
    found, forks, started = {}, {}, {}
    for pid, t, call in lines:
        t = (float(t) - t0) * 1000
        # A call that another process's call interrupted in the trace is split in two lines:
        # take it whole, at its start, when it returns.
        if call.rstrip().endswith("<unfinished ...>"):
            started[pid] = (t, call.split("(", 1)[0])
            continue
        if call.startswith("<... ") and pid in started:
            t, name = started.pop(pid)
            call = name + "(" + call.split(">", 1)[1]
        # The store: a socket connect, or the file store's lock directory (from dlock or one
        # of its threads; not the loader's libraries, /etc or /proc).
        store = call.startswith("connect(") and "nscd" not in call
        store |= call.startswith("openat(") and not any(
            s in call for s in ("/etc/", "/lib", "/proc/", "/sys/", ".so", "/dev/")
        )
        if store and "exec" not in found:
            found.setdefault("store", t)
        # The command's fork is the watchdog's, not dlock's.
        if call.startswith(("clone(", "clone3(")) and "=" in call:
            forks[call.rsplit("=", 1)[1].strip()] = t
        if pid == main and call.startswith("exit_group("):
            found["end"] = t
        elif pid != main and call.startswith("execve(") and call.rstrip().endswith("= 0"):
            if "exec" not in found:
                found["exec"], found["child"] = t, pid
                found["fork"] = forks.get(pid)
        elif pid == found.get("child") and call.startswith("exit_group("):
            found["exit"] = t
    return [found.get(k) for k in ("store", "fork", "exec", "exit", "end")]


def main():
    if sys.argv[1:] == ["--header"]:
        print("| phases of `dlock run x -- true`, median ms | " + " | ".join(PHASES) + " | total |")
        print("|---|" + "---:|" * (len(PHASES) + 1))
        return
    name, traces = sys.argv[1], sys.argv[2:]
    rows = [marks(p) for p in traces]
    rows = [r for r in rows if None not in r]
    if not rows:
        sys.exit(f"{name}: no complete trace")
    cols = [[r[0]] + [b - a for a, b in zip(r, r[1:])] for r in rows]
    med = [statistics.median(c[i] for c in cols) for i in range(len(PHASES))]
    total = statistics.median(r[-1] for r in rows)
    print(f"| {name} | " + " | ".join(f"{m:.2f}" for m in med) + f" | {total:.2f} |")


if __name__ == "__main__":
    main()
