"""The suite's exception types, defined once and used by every package.

Library code raises these instead of bare ``assert`` or ``ValueError`` so that
command-line tools can turn a user mistake into one clear sentence and a
non-zero exit, while genuine bugs still surface as tracebacks.
"""

from __future__ import annotations

import signal


class GenError(Exception):
    """Base class of every error the gen* suite raises on purpose."""


class InputError(GenError, ValueError):
    """Bad user input: wrong shape, NaN/inf values, mismatched dimensions."""


class ConfigError(GenError, ValueError):
    """An unknown name or an invalid setting in a configuration."""


class StorageError(GenError, OSError):
    """A file or folder that cannot be read or written as asked."""


class ConvergenceError(GenError, RuntimeError):
    """An iterative solver did not reach the requested tolerance."""


class Interrupted(GenError):
    """A run stopped by SIGTERM/SIGINT after writing a checkpoint.

    Commands exit with ``128 + signum`` (130 for Ctrl-C, 143 for SIGTERM), as a shell does for a process
    killed by that signal, so that ``train && sample`` stops and a batch scheduler sees an unfinished job.
    """

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)
