"""The container images: Dockerfile rules, and their steps run as plain commands.

No container engine runs here, so each stage's steps are executed for real on this
machine with the image's paths mapped into a temp dir:
- the build stage: its COPY lines copy from the repository into a temp /src, its RUN
  lines build the wheel and the venv; then the installed entry points are run, and the
  venv is searched for pip, setuptools and (in the controller's) runners;
- the runtime stage: its RUN deletes the base image's pip, setuptools and wheel, here
  from a stand-in for the base image's /usr/local (a venv holding pip, setuptools and
  wheel: the same bin/ and lib/python3.11/site-packages/ layout).
Real: pip, the package index, the built wheel, the console scripts, rm and the guard
the stage runs. Faked: the image filesystem (temp dirs for /src, /opt/longrun,
/tmp/wheels and /usr/local) and the base image's /usr/local (the stand-in).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from controller.core.settings import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {"runner": ROOT / "docker" / "runner.Dockerfile",
               "controller": ROOT / "docker" / "controller.Dockerfile"}  # fmt: skip
BUILD_TOOLS = ("gcc", "build-essential", "apt-get install", "make ")
PINNED_BASE = re.compile(r"python:\d+\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}")
PACKAGING = ("pip", "setuptools", "wheel")
PYLIB = f"lib/python{sys.version_info.major}.{sys.version_info.minor}"
COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


@dataclass
class Stage:
    base: str
    name: str | None
    lines: list[str]

    def runs(self) -> list[str]:
        return [line[4:] for line in self.lines if line.startswith("RUN ")]


def _stages(path: Path) -> list[Stage]:
    stages: list[Stage] = []
    for line in path.read_text().replace("\\\n", " ").splitlines():
        if line.startswith("FROM "):
            words = line.split()
            stages.append(Stage(words[1], words[3] if len(words) == 4 else None, []))
        if stages and line.strip() and not line.startswith("#"):
            stages[-1].lines.append(line.strip())
    return stages


def _stage(name: str, stage: str) -> Stage:
    return next(s for s in _stages(DOCKERFILES[name]) if s.name == stage)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_digest(name: str) -> None:
    stages = _stages(DOCKERFILES[name])
    assert len(stages) >= 2
    earlier: set[str | None] = set()
    for stage in stages:
        assert (
            stage.base == "scratch" or stage.base in earlier or PINNED_BASE.fullmatch(stage.base)
        ), stage.base
        earlier.add(stage.name)
    pulled = {s.base for s in stages if PINNED_BASE.fullmatch(s.base)}
    assert len(pulled) == 1  # every stage pulls the same pinned image


def test_both_images_pull_the_same_base() -> None:
    bases = {s.base for path in DOCKERFILES.values() for s in _stages(path) if "@" in s.base}
    assert len(bases) == 1, bases


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_final_stage_is_non_root_without_build_tools(name: str) -> None:
    final = _stages(DOCKERFILES[name])[-1].lines
    user = next(line for line in final if line.startswith("USER "))
    assert int(user.split()[1].split(":")[0]) > 0
    assert not any(tool in line for line in final for tool in BUILD_TOOLS)
    assert not any(line.startswith("RUN ") for line in final)
    assert any(line.startswith("ENTRYPOINT ") for line in final)
    assert any("PYTHONDONTWRITEBYTECODE=1" in line for line in final)  # read-only root fs


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_final_image_takes_the_base_only_from_the_stage_without_pip(name: str) -> None:
    # FROM the base image would bring its pip back in a lower layer: start from nothing,
    # take the cleaned runtime stage's filesystem and the venv, and nothing else.
    final = _stages(DOCKERFILES[name])[-1]
    assert final.base == "scratch"
    copies = [line for line in final.lines if line.startswith(("COPY ", "ADD "))]
    assert copies == ["COPY --from=runtime / /", "COPY --from=build /opt/longrun /opt/longrun"]
    assert PINNED_BASE.fullmatch(_stage(name, "runtime").base)


def test_chart_defaults_name_the_images_built_here() -> None:
    values = yaml.safe_load((ROOT / "charts" / "longrun" / "values.yaml").read_text())
    labels = {
        name: re.search(r'dev\.longrun\.image="([^"]+)"', path.read_text()).group(1)  # type: ignore[union-attr]
        for name, path in DOCKERFILES.items()
    }
    assert values["image"]["repository"] == labels["controller"]
    assert values["runner"]["image"]["repository"] == labels["runner"]
    assert DEFAULT_IMAGE.rpartition(":")[0] == labels["runner"]  # the controller's own default


def test_controller_image_copies_no_runner_code() -> None:
    copied = [line.split()[1:-1] for line in _stage("controller", "build").lines
              if line.startswith("COPY ")]  # fmt: skip
    assert not any(source.startswith("runners") for sources in copied for source in sources)


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_build_context_lets_in_exactly_what_the_copy_lines_name(name: str) -> None:
    # BuildKit reads <Dockerfile>.dockerignore beside the Dockerfile: the context is then a
    # few hundred KiB, not the repository with its .venv.
    ignore = DOCKERFILES[name].with_name(DOCKERFILES[name].name + ".dockerignore")
    patterns = [p for p in ignore.read_text().splitlines() if p and not p.startswith("#")]
    allowed = {p[1:] for p in patterns if p.startswith("!")}
    copied = {source for line in _stage(name, "build").lines if line.startswith("COPY ")
              for source in line.split()[1:-1]}  # fmt: skip
    assert patterns[0] == "*" and allowed == copied


def _bare_python(command: str, python: str) -> str:
    """`python` as a command word (not inside a path or an option) replaced by `python`."""
    return re.sub(r"(?<![\w/.-])python(?= )", python, command)


def _run(command: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", command], cwd=cwd, check=True, timeout=900,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # fmt: skip


def _copy(line: str, workdir: Path) -> None:
    """A build-context COPY (`COPY src... dest`), relative to the stage's WORKDIR."""
    *sources, dest = line.split()[1:]
    target = workdir / dest
    for source in sources:
        path = ROOT / source
        if path.is_dir():
            shutil.copytree(path, target, ignore=COPY_IGNORE, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)


def _run_build_stage(name: str, tmp: Path) -> Path:
    """COPY and RUN the build stage with /src, /opt/longrun and /tmp/wheels under `tmp`."""
    src, venv, wheels = tmp / "src", tmp / "opt-longrun", tmp / "wheels"
    src.mkdir()
    for line in _stage(name, "build").lines:
        if line.startswith("COPY "):
            _copy(line, src)
        elif line.startswith("RUN "):
            command = (
                line[4:].replace("/opt/longrun", str(venv)).replace("/tmp/wheels", str(wheels))
            )
            _run(_bare_python(command, sys.executable), src)
    return venv


def _importable(python: Path, *modules: str) -> list[str]:
    code = "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if u.find_spec(m)])"
    out = subprocess.run([str(python), "-c", code, *modules], capture_output=True, text=True,
                         check=True, timeout=60, cwd="/", env={"HOME": "/nonexistent"})  # fmt: skip
    return out.stdout.split()


def _console(venv: Path, *args: str, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], capture_output=True,
                          text=True, timeout=60, cwd="/",
                          env={"PATH": str(venv / "bin"), "HOME": str(tmp), **env})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_runtime_stage_deletes_the_base_images_pip_setuptools_and_wheel(
    name: str, tmp_path: Path
) -> None:
    standin = tmp_path / "usr-local"  # the base image's /usr/local: pip, setuptools, wheel
    subprocess.run([sys.executable, "-m", "venv", str(standin)], check=True, timeout=300)
    _run(f"{standin}/bin/python -m pip install -q wheel", tmp_path)
    (standin / PYLIB / "ensurepip").mkdir()  # a venv has no stdlib of its own: stand it in
    assert set(_importable(standin / "bin" / "python", *PACKAGING)) == set(PACKAGING)
    for command in _stage(name, "runtime").runs():
        command = command.replace("/usr/local/lib/python3.11", str(standin / PYLIB))
        command = command.replace("/usr/local/", f"{standin}/")
        _run(_bare_python(command, str(standin / "bin" / "python")), tmp_path)
    assert _importable(standin / "bin" / "python", *PACKAGING, "json") == ["json"]
    scripts = [p.name for p in (standin / "bin").iterdir() if p.name.startswith(("pip", "wheel"))]
    assert scripts == []
    assert not (standin / PYLIB / "ensurepip").exists()


@pytest.mark.slow
def test_runner_install_steps_and_entry_point_work_in_a_fresh_venv(tmp_path: Path) -> None:
    venv = _run_build_stage("runner", tmp_path)
    help_text = _console(venv, "longrun-runner", "--help", tmp=tmp_path)
    assert help_text.returncode == 0 and "CONTRACT_PATH" in help_text.stdout
    golden = ROOT / "testdata" / "contracts" / "iris-sql.json"
    checked = _console(venv, "longrun-runner", "--check", tmp=tmp_path, CONTRACT_PATH=str(golden))
    assert checked.returncode == 0, checked.stderr
    assert _importable(venv / "bin" / "python", *PACKAGING, "runners") == ["runners"]
    shutil.rmtree(tmp_path / "wheels", ignore_errors=True)


@pytest.mark.slow
def test_controller_venv_has_the_cli_but_no_runners_and_no_pip(tmp_path: Path) -> None:
    venv = _run_build_stage("controller", tmp_path)
    version = _console(venv, "longrun", "--version", tmp=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("longrun "), version.stderr
    python = venv / "bin" / "python"
    wanted = (
        "controller.runtime.main",
        "local",
        "prometheus_client",
        "kubernetes",
        "batchapi",
        "boto3",
    )
    assert _importable(python, *wanted, *PACKAGING, "runners") == list(wanted)
    (wheel,) = (tmp_path / "wheels").glob("longrun-*.whl")
    with zipfile.ZipFile(wheel) as built:
        assert not [n for n in built.namelist() if n.startswith("runners/")]
    assert not (venv / "bin" / "longrun-runner").exists()  # its module is not there
    shutil.rmtree(tmp_path / "wheels", ignore_errors=True)
