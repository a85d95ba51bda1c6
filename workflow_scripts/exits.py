"""Say how a process ended in words a user can act on: a signal by name and its usual cause,
not a bare negative return code."""

from __future__ import annotations

import signal

# The usual cause of each signal a server or build dies of, and what to look at.
SIGNAL_CAUSES = {
    signal.SIGILL: (
        "illegal instruction: the binary uses CPU instructions this machine cannot execute"
    ),
    signal.SIGKILL: ("often the out-of-memory killer: see memory.csv and the kernel log (dmesg)"),
    signal.SIGSEGV: "segmentation fault: a crash in the program",
    signal.SIGABRT: "aborted: the program stopped itself on a failed check; see its log",
    signal.SIGBUS: "bus error: often a truncated or changed model file that was memory-mapped",
    signal.SIGFPE: "arithmetic fault",
}


def signal_text(signum: int) -> str:
    """`SIGILL (illegal instruction: ...)`, or just the name for signals without a known cause."""
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}"
    cause = SIGNAL_CAUSES.get(sig)
    return f"{sig.name} ({cause})" if cause else sig.name


def describe_exit(returncode: int | None) -> str:
    """How a process ended, from a `subprocess` return code (negative: killed by a signal).
    Shells and containers report a signal as 128 + N; those are named as likely signals."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        return f"was killed by {signal_text(-returncode)}"
    if 128 < returncode <= 128 + 64 and _is_signal(returncode - 128):
        number = returncode - 128
        return f"exited with code {returncode} (128 + {number}: likely {signal_text(number)})"
    return f"exited with code {returncode}"


def _is_signal(number: int) -> bool:
    try:
        signal.Signals(number)
    except ValueError:
        return False
    return True
