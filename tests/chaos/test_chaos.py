"""The bounded chaos suite (the full one: ``make chaos``): real ``kappa run`` processes
interrupted by a process-group SIGTERM part way and by SIGKILL followed by the loss of the
checkpoint; the output must equal an uninterrupted run row for row, or the run must refuse
with a named error."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import chaos  # noqa: E402


def test_bounded_chaos_loses_and_doubles_nothing(capsys) -> None:  # type: ignore[no-untyped-def]
    code = chaos.main(
        [
            "--scenarios",
            "2",
            "--seed",
            "7",
            "--riders",
            "12",
            "--hours",
            "6",
            "--only",
            "sigterm-group",
            "lost-checkpoint",
        ]
    )
    out = capsys.readouterr().out
    print(out)
    assert "0 lost, 0 duplicated" in out
    assert code == 0, out
