"""The package as users install it: Meson's version floor the same in pyproject.toml and meson.build,
a build missing its system libraries stopped at once by a message naming them and the command that
installs them, the installed wheel tagged for the platform but no Python version, and the public API
clean under ``mypy --strict``."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import wccl

ROOT = Path(__file__).resolve().parents[2]


def test_meson_version_floors_agree():
    pyproject = (ROOT / "pyproject.toml").read_text()
    build = (ROOT / "meson.build").read_text()
    wheel_floor = re.search(r'"meson>=([0-9.]+)"', pyproject).group(1)
    project_floor = re.search(r"meson_version: '>=([0-9.]+)'", build).group(1)
    assert wheel_floor == project_floor


@pytest.mark.skipif(shutil.which("meson") is None, reason="needs meson on PATH")
def test_a_build_without_the_system_libraries_names_them(tmp_path):
    """pkg-config pointed at an empty directory stands in for a machine without the -dev packages:
    the wheel's configuration (-Dpython_wheel=true, as pip runs it) stops before compiling, naming
    libuv and zstd and the apt-get command."""
    env = dict(os.environ, PKG_CONFIG_LIBDIR=str(tmp_path / "empty"))
    out = subprocess.run(["meson", "setup", str(tmp_path / "build"), str(ROOT), "-Dpython_wheel=true", "-Dtests=false",
                          "-Dbench=false", "-Dcuda=disabled", "-Dfuzz=disabled"],
                         capture_output=True, text=True, env=env, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "libuv >= 1.40" in text and "zstd" in text, text[-2000:]
    assert "sudo apt-get install pkg-config libuv1-dev" in text and "libzstd-dev" in text, text[-2000:]


def test_the_installed_wheel_is_tagged_for_any_python3():
    try:
        dist = importlib.metadata.distribution("wccl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("wccl is not installed in this environment (pip install .)")
    tags = [line.split(": ", 1)[1] for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag: ")]
    assert tags and all(t.startswith("py3-none-") and not t.endswith("-any") for t in tags), tags
    assert dist.version == wccl.__version__


def test_the_public_api_passes_mypy_strict():
    pytest.importorskip("mypy")
    package = Path(wccl.__file__).resolve().parent
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", os.devnull, "-p", "wccl"],
                         capture_output=True, text=True, cwd=package.parent, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_wheels_wccl_perf_runs():
    """The console script `wccl-perf` that pip installs runs the program the wheel carries beside
    libwccl: a small local all-reduce, every element checked (it exits non-zero on a wrong one)."""
    script = Path(sys.executable).with_name("wccl-perf")
    if not script.exists():
        pytest.skip("wccl is not installed in this environment (pip install .)")
    out = subprocess.run([str(script), "--local", "2", "--tls", "off", "-b", "4K", "-e", "64K", "-f", "4", "-n", "2",
                          "-w", "1"], capture_output=True, text=True, timeout=120,
                         env={**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WCCL_LIBRARY")},
                              "WCCL_LOG_LEVEL": "error"})  # the installed package, not the build tree's
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.strip() and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [4096, 16384, 65536] and all(r[-1] == "0" for r in rows), out.stdout
