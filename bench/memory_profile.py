"""Where a Spark driver's memory goes over a run: PSS of its JVM and of the Python process
that started it, and the JVM's own accounting (Native Memory Tracking), sampled every 2 s.

Used by ``bench/bench_state.py --memory-profile``: a way's peak PSS alone cannot tell state
that grows with the range from a JVM that warms up (compiled code, class metadata, thread
stacks, native allocations reaching their steady state); the same second of two runs of
different lengths can.

    profile = MemoryProfile(str(events_dir))  # a string in the JVM's command line
    profile.start(); ...; profile.stop()
    profile.table("365 d A")  # markdown rows at 20 ... 480 s and at the peak
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kappaplus.local.processes import parent_pid

NMT_OPTION = "-XX:NativeMemoryTracking=summary"
"""The JVM option the profile needs (a few percent of the JVM's time, per the JDK's docs)."""

AT_SECONDS = (20, 40, 60, 120, 240, 480)


@dataclass
class Sample:
    seconds: float
    jvm_pss_mb: int
    python_pss_mb: int
    nmt_mb: dict[str, int] = field(default_factory=dict)


def _pss_mb(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    match = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) // 1024 if match else 0


def _nmt_mb(pid: int) -> dict[str, int]:
    """Committed MB per Native Memory Tracking category (``jcmd``)."""
    try:
        text = subprocess.run(
            ["jcmd", str(pid), "VM.native_memory", "summary"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {
        m.group(1).strip(): int(m.group(2)) // 1024
        for m in re.finditer(r"-\s+([\w ]+?) \(reserved=\d+KB, committed=(\d+)KB", text)
    }
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", text)
    if total:
        found["Total"] = int(total.group(1)) // 1024
    return found


class MemoryProfile:
    """Samples the driver JVM whose command line contains ``marker`` (and its parent)."""

    def __init__(self, marker: str, every: float = 2.0) -> None:
        self.marker = marker
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._began = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _jvm(self) -> int | None:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"SparkSubmit" in cmdline and self.marker.encode() in cmdline:
                return int(proc.name)
        return None

    def _run(self) -> None:
        pid = None
        count = 0
        while not self._stop.is_set():
            pid = pid or self._jvm()
            if pid is not None:
                jvm = _pss_mb(pid)
                if jvm:
                    nmt = _nmt_mb(pid) if count % 5 == 0 else {}
                    seconds = time.perf_counter() - self._began
                    parent = parent_pid(pid)
                    python = _pss_mb(parent) if parent else 0
                    self.samples.append(Sample(seconds, jvm, python, nmt))
                    count += 1
            self._stop.wait(self.every)

    @staticmethod
    def _nearest(samples: list[Sample], seconds: float) -> Sample:
        return min(samples, key=lambda s: abs(s.seconds - seconds))

    def table(self, label: str) -> list[str]:
        """Markdown rows: ``label``, second, PSS JVM / Python / both, and the JVM's committed
        compiled code, class metadata, thread stacks and heap (MB), at :data:`AT_SECONDS` and
        at the run's largest PSS."""
        rows: list[str] = []
        if not self.samples:
            return rows
        with_nmt = [s for s in self.samples if s.nmt_mb]
        peak = max(self.samples, key=lambda s: s.jvm_pss_mb + s.python_pss_mb)
        wanted = [t for t in AT_SECONDS if t <= self.samples[-1].seconds]
        picks = [self._nearest(self.samples, t) for t in wanted]
        for sample in [*picks, peak]:
            nmt = self._nearest(with_nmt, sample.seconds).nmt_mb if with_nmt else {}
            rows.append(
                f"| {label} | {'peak ' if sample is peak else ''}{sample.seconds:.0f} | "
                f"{sample.jvm_pss_mb:,} | {sample.python_pss_mb:,} | "
                f"{sample.jvm_pss_mb + sample.python_pss_mb:,} | {nmt.get('Code', 0)} | "
                f"{nmt.get('Metaspace', 0)} | {nmt.get('Thread', 0)} | {nmt.get('Java Heap', 0)} |"
            )
        return rows


TABLE_HEAD = [
    "| run | second | PSS JVM MB | PSS Python MB | both | JIT code MB | class metadata MB "
    "| thread stacks MB | heap committed MB |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
]
