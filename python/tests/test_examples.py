"""examples/python/train_mlp.py trains the C example's model from the same weights and data:
the two loss curves must agree."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("OCLML_TEST_BUILDDIR", SRC)


def package_env():
    """The environment with the source tree's package first (what PYTHONPATH held kept: it may
    name where cffi or NumPy is)."""
    path = os.path.join(SRC, "python")
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=path + (os.pathsep + old if old else ""))


def curve(out):
    return [float(v) for v in re.findall(r"^step +\d+ +loss ([0-9.eE+-]+)", out, re.M)]


def test_python_mlp_matches_the_c_example():
    c_example = os.path.join(BUILD, "examples", "train_mlp")
    if not os.path.exists(c_example):
        pytest.skip("no examples/train_mlp in the build tree")
    args = ["--steps", "12", "--batch", "64"]
    # The environment as Python holds it: a driver loaded in this process may have changed the
    # C library's copy, which children inherit by default.
    c = subprocess.run([c_example] + args, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ))
    env = package_env()
    py = subprocess.run([sys.executable, os.path.join(SRC, "examples", "python", "train_mlp.py")]
                        + args, capture_output=True, text=True, timeout=600, env=env)
    assert py.returncode in (0, 1), py.stderr
    a, b = curve(c.stdout), curve(py.stdout)
    assert len(a) == len(b) == 12, (c.stdout, py.stdout)
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print("\nloss curves, C and Python: worst relative difference %.1e" % worst)
    assert worst <= 1e-6


def test_rssm_example_runs(tmp_path):
    env = package_env()
    r = subprocess.run([sys.executable, os.path.join(SRC, "examples", "python", "rssm_rollout.py"),
                        "--members", "3", "--steps", "6", "--plot", str(tmp_path / "r.png")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert "mean y" in r.stdout and "member" in r.stdout
