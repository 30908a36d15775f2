"""Checks that every package's test suite runs against its own console script.

Kept in the library (not copied into each package's tests) so that the contract
"a package installs alone and its command answers" is written once.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import version


def check_console_script(package: str) -> None:
    """Assert that ``package`` reports its installed version and gives one-sentence usage errors.

    Runs ``python -m <package>.cli`` for ``--version``, ``--help``, ``info`` and an unknown verb.
    """
    module = importlib.import_module(package)
    assert module.__version__ == version(package), "package __version__ differs from its installed metadata"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], capture_output=True, text=True)

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"{package} {module.__version__}", out
    out = cli("--help")
    assert out.returncode == 0 and f"usage: {package}" in out.stdout, out
    out = cli("info")
    assert out.returncode == 0 and "on gencore" in out.stdout, out
    out = cli("no-such-verb")
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and "invalid choice" in out.stderr, out.stderr
