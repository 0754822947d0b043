"""Runs ``headrace`` with the log cleaner's fault hook armed: the broker SIGKILLs itself
when the cleaner reaches the point named by the first argument. Test-only launcher
(``EmbeddedBroker(launcher=[python, this file, POINT])``); production never imports it.
"""

from __future__ import annotations

import os
import signal
import sys

from headrace.cli.app import main
from headrace.storage import cleaner


def _arm(point: str) -> None:
    def hook(name: str) -> None:
        if name == point:
            os.kill(os.getpid(), signal.SIGKILL)

    cleaner.set_fault_hook(hook)


if __name__ == "__main__":
    _arm(sys.argv.pop(1))
    main()
