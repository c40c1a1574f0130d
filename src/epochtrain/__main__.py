"""``python -m epochtrain``: the same as the ``epochtrain`` command.

The command's module imports torch, which takes seconds; a Ctrl-C (or SIGTERM) meanwhile
ends the process as one during the command does (:mod:`epochtrain.cli_interrupts`): one
line, exit status 130 (143), no traceback.
"""

from __future__ import annotations

import sys

from epochtrain.cli_interrupts import end_interrupted, exit_at_interrupt


def main() -> int:
    """Import the command, then run it on ``sys.argv``; returns the exit status."""
    argv = sys.argv[1:]
    try:
        with exit_at_interrupt(argv):
            from epochtrain.cli import main as run_command
        return run_command()
    except KeyboardInterrupt as exc:  # after the import, before the command's handler
        return end_interrupted(exc, argv, process_ends=True)


if __name__ == "__main__":
    sys.exit(main())
