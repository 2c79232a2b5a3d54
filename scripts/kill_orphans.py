"""How long the workers of a ``kernevo evolve`` job live after ``kill -9`` of the job alone.

    python scripts/kill_orphans.py [--gpu] [--wait-iterations 3] [--dtype float32]

Starts a job (compile-only, or with ``--gpu`` a real GPU job whose pool worker runs a GPU worker)
in a temporary folder, waits until its worker processes run and it recorded a few iterations,
lists every descendant from ``/proc``, sends SIGKILL to the job's process only (not its group)
and prints when each descendant was gone (a zombie counts as gone). Exit status 1 if any was
alive 5 s after the kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEADLINE_S = 5.0


def proc_stat(pid: int) -> tuple[int, str, int, str] | None:
    """(ppid, state, start time in ticks, command line) of ``pid``, or ``None`` when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0], int(fields[19]), cmd


def descendants(root: int) -> dict[int, tuple[int, str, int]]:
    """pid → (depth below ``root``, command line, start time) of every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := proc_stat(int(entry.name))) and st[1] != "Z":
            children.setdefault(st[0], []).append(int(entry.name))
    found: dict[int, tuple[int, str, int]] = {}
    queue = [(root, 0)]
    while queue:
        pid, depth = queue.pop()
        for child in children.get(pid, []):
            st = proc_stat(child)
            if st is not None:
                found[child] = (depth + 1, st[3], st[2])
                queue.append((child, depth + 1))
    return found


def alive(pid: int, start: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st[2] == start and st[1] != "Z"


def iteration(db: Path) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            row = connection.execute("SELECT max(iteration) FROM job").fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0] or 0) if row else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="a GPU job (default: compile-only)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--wait-iterations", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kernevo-orphans-"))
    db = tmp / "lineage.db"
    command = [
        sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small",
        "--dtype", args.dtype, "--iterations", "100000", "--promote-every", "100000",
        "--database-url", f"sqlite:///{db}", "--work-dir", str(tmp / "runs"),
    ] + ([] if args.gpu else ["--compile-only"])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    env["KERNEVO_COMPILE_CACHE"] = str(tmp / "cubin-cache")
    job = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "stderr.txt", "w"),  # noqa: SIM115 - the child holds it
        start_new_session=True,
    )
    depth = 2 if args.gpu else 1
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        family = descendants(job.pid)
        workers = [p for p, (d, cmd, _) in family.items() if d >= depth and "spawn_main" in cmd]
        if workers and iteration(db) >= args.wait_iterations:
            break
        if job.poll() is not None:
            print(f"the job ended first (exit {job.returncode}); see {tmp / 'stderr.txt'}")
            return 1
        time.sleep(0.1)
    else:
        job.kill()
        print("timed out waiting for the workers")
        return 1
    print(f"job pid {job.pid} at iteration {iteration(db)}; descendants:")
    for pid, (d, cmd, _) in sorted(family.items(), key=lambda item: item[1][0]):
        print(f"  depth {d} pid {pid}: {cmd[:110]}")
    killed_at = time.monotonic()
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    gone: dict[int, float] = {}
    while len(gone) < len(family) and time.monotonic() - killed_at < 30:
        for pid, (_, _, start) in family.items():
            if pid not in gone and not alive(pid, start):
                gone[pid] = time.monotonic() - killed_at
        time.sleep(0.01)
    late = []
    for pid, (d, _, start) in family.items():
        seconds = gone.get(pid)
        when = f"gone after {seconds:.2f} s" if seconds is not None else "ALIVE"
        print(f"  pid {pid} (depth {d}): {when}")
        if seconds is None or seconds > DEADLINE_S:
            late.append(pid)
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)  # clean up what this script started
    print(f"kill -9 of the job alone: {len(family) - len(late)}/{len(family)} gone within 5 s")
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
