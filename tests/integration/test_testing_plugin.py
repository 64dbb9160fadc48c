"""kompakt.testing as a user gets it: this checkout installed into a fresh virtualenv, and the
example project in tests/plugin_example (an application that is not Kompakt, with no conftest)
run by `pytest` in a subprocess: its tests find the kompakt_* fixtures through the `pytest11`
entry point only, and pass with confluent-kafka, kafka-python and aiokafka under pytest-asyncio,
in-process and subprocess brokers.

Offline and quick: `python -m venv --without-pip`, lent the packages of the environment running
this test (the clients, pytest, pip, setuptools, wheel) by a .pth file, then `pip install --no-deps
--no-build-isolation --no-index` of a copy of the package files (so the checkout gets no build/ or
egg-info), with PYTHONPATH cleared so nothing of the checkout leaks in. About 15 s.
Not `--system-site-packages`: a venv made by a virtualenv's python has the *base* interpreter as
its home, so it would see the base's packages rather than this virtualenv's (and fail to build
with "invalid command 'bdist_wheel'" where the base has no wheel); the .pth lends whichever
environment runs the suite, a virtualenv or not.
"""
from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "plugin_example"


def run(cmd, cwd, env, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("plugin-venv")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kompakt", src / "kompakt", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("KOMPAKT_", "PYTEST_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], base, env)
    python = str(base / "venv" / "bin" / "python")
    lend_site_packages(python, base, env)
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(src)], base, env)
    return python, env


def lend_site_packages(python: str, cwd: Path, env: dict) -> None:
    """Make this environment's site dirs (and their .pth files) importable in the venv of
    `python`, after the venv's own site-packages, so what the venv installs comes first."""
    ours = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    theirs = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd, env).stdout.strip()
    lines = "; ".join(f"site.addsitedir({d!r})" for d in ours if os.path.isdir(d))
    Path(theirs, "_lent_by_the_test_environment.pth").write_text(f"import site; {lines}\n")


@pytest.mark.slow
def test_the_installed_plugin_serves_a_foreign_project(venv, tmp_path):
    python, env = venv
    where = run([python, "-c", "import kompakt, sys; print(kompakt.__file__); print(sys.prefix)"], tmp_path, env)
    module_file, prefix = where.stdout.split()
    assert module_file.startswith(prefix), "the venv must import its installed kompakt, not the checkout's"

    # cheap to load: the plugin module imports no broker code (and no kafka-python)
    probe = run([python, "-c", "import sys, kompakt.testing.plugin; "
                 "print(sorted(m for m in sys.modules if m.startswith(('kompakt.broker', 'kafka'))))"], tmp_path, env)
    assert probe.stdout.strip() == "[]"

    project = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    out = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"],
              project, env).stdout
    assert re.search(r"\b6 passed\b", out), out
    assert "kompakt_broker" not in (project / "pyproject.toml").read_text()     # nothing but the plugin


def test_the_readme_example_is_the_one_the_example_project_runs():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Testing your application", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert block.strip() in (EXAMPLE / "test_readme.py").read_text()
