"""The installable package: ``pip install .`` (not editable) into a fresh venv outside the checkout gives a
``fedbench`` command that runs a preset from any directory, with the configs inside the package, and user presets
added through Hydra's search path."""

import json
import site
import subprocess
import venv

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with fedbench installed from a copy of the checkout; the heavy dependencies (torch, ...)
    come from this interpreter's site-packages through a .pth file instead of a second download."""
    base = tmp_path_factory.mktemp("pkg")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    (base / "venv" / purelib.split(str(env_dir) + "/", 1)[1] / "_deps.pth").write_text("\n".join(deps) + "\n")
    src = base / "src_copy"
    subprocess.run(f"cd {ROOT} && git ls-files -co --exclude-standard | tar cf - -T - | (mkdir -p {src} && "
                   f"tar xf - -C {src})", shell=True, check=True)
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps",
                           "--disable-pip-version-check", str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return env_dir


def _fedbench(env_dir, cwd, *args):
    return subprocess.run([str(env_dir / "bin" / "fedbench"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "WANDB_SILENT": "true"})


@pytest.mark.slow
def test_pip_install_gives_a_fedbench_command_that_runs_anywhere(installed, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    proc = _fedbench(installed, work, "experiment=smoke", "dataset=digits", "logger=none", "rounds=2",
                     "eval_every=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summaries = list((work / "outputs").rglob("summary.json"))
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["status"] == "completed"
    located = subprocess.run([str(installed / "bin" / "python"), "-c", "import fedbench; print(fedbench.__file__)"],
                             capture_output=True, text=True, cwd=work)
    assert str(installed) in located.stdout and str(ROOT) not in located.stdout  # the installed copy ran


@pytest.mark.slow
def test_a_users_own_preset_is_found_through_the_config_dir(installed, tmp_path):
    work = tmp_path / "user"
    (work / "my_conf" / "experiment").mkdir(parents=True)
    (work / "my_conf" / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /dataset: digits\n  - override /model: logreg\n"
        "  - override /partition: iid\n  - override /logger: none\nrounds: 2\neval_every: 1\n"
        "partition:\n  num_clients: 6\nparticipation:\n  selection:\n    clients_per_round: 3\n")
    proc = _fedbench(installed, work, "--config-dir", "my_conf", "experiment=mine")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(next((work / "outputs").rglob("summary.json")).read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 2 and summary["num_clients"] == 6
