"""The container images: Dockerfile rules, and their install steps run as plain commands.

No container engine runs here, so the build stage's RUN steps are executed for real in a
fresh virtualenv (paths mapped into a temp dir), and the installed entry points are run.
Real: pip, the package index, the built wheel, the console scripts. Faked: the image
filesystem (a temp dir instead of /opt/longrun).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.core.settings import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {"runner": ROOT / "docker" / "runner.Dockerfile",
               "controller": ROOT / "docker" / "controller.Dockerfile"}  # fmt: skip
BUILD_TOOLS = ("gcc", "build-essential", "apt-get install", "make ")


def _stages(path: Path) -> list[list[str]]:
    stages: list[list[str]] = []
    for line in path.read_text().replace("\\\n", " ").splitlines():
        if line.startswith("FROM "):
            stages.append([])
        if stages and line.strip() and not line.startswith("#"):
            stages[-1].append(line.strip())
    return stages


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_is_multi_stage_with_pinned_base(name: str) -> None:
    stages = _stages(DOCKERFILES[name])
    assert len(stages) >= 2
    for stage in stages:
        assert re.fullmatch(r"FROM python:\d+\.\d+\.\d+-slim-\w+( AS \w+)?", stage[0]), stage[0]


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_final_stage_is_non_root_without_build_tools(name: str) -> None:
    final = _stages(DOCKERFILES[name])[-1]
    user = next(line for line in final if line.startswith("USER "))
    assert int(user.split()[1].split(":")[0]) > 0
    assert not any(tool in line for line in final for tool in BUILD_TOOLS)
    assert not any(line.startswith("RUN ") for line in final)
    assert any(line.startswith("ENTRYPOINT ") for line in final)
    assert any("PYTHONDONTWRITEBYTECODE=1" in line for line in final)  # read-only root fs


def test_chart_defaults_name_the_images_built_here() -> None:
    values = yaml.safe_load((ROOT / "charts" / "longrun" / "values.yaml").read_text())
    labels = {
        name: re.search(r'dev\.longrun\.image="([^"]+)"', path.read_text()).group(1)  # type: ignore[union-attr]
        for name, path in DOCKERFILES.items()
    }
    assert values["image"]["repository"] == labels["controller"]
    assert values["runner"]["image"]["repository"] == labels["runner"]
    assert DEFAULT_IMAGE.rpartition(":")[0] == labels["runner"]  # the controller's own default


def _run_build_steps(dockerfile: Path, workdir: Path) -> Path:
    """Execute the build stage's RUN steps with /opt/longrun and /tmp/wheels mapped to workdir."""
    venv, wheels = workdir / "opt-longrun", workdir / "wheels"
    for line in _stages(dockerfile)[0]:
        if not line.startswith("RUN "):
            continue
        command = line[4:].replace("/opt/longrun", str(venv)).replace("/tmp/wheels", str(wheels))
        command = command.replace("python -m venv", f"{sys.executable} -m venv")
        subprocess.run(["bash", "-c", command], cwd=ROOT, check=True, timeout=900,
                       env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # fmt: skip
    return venv


@pytest.mark.slow
def test_runner_install_steps_and_entry_point_work_in_a_fresh_venv(tmp_path: Path) -> None:
    venv = _run_build_steps(DOCKERFILES["runner"], tmp_path)
    runner = venv / "bin" / "longrun-runner"
    help_text = subprocess.run([str(runner), "--help"], capture_output=True, text=True,
                               check=True, timeout=60).stdout  # fmt: skip
    assert "CONTRACT_PATH" in help_text
    golden = ROOT / "testdata" / "contracts" / "iris-sql.json"
    env = {"PATH": str(venv / "bin"), "CONTRACT_PATH": str(golden), "HOME": str(tmp_path)}
    checked = subprocess.run([str(runner), "--check"], capture_output=True, text=True,
                             env=env, cwd="/", timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    shutil.rmtree(tmp_path / "wheels", ignore_errors=True)
