"""Compile llama.cpp's own ``llama-server`` into the ``llamacpp`` env (its ``setup`` step).

Why from the llama-cpp-python sdist: ``llama-server`` is not on PyPI as a binary, and PyPI is
the only registry these machines reach; llama-cpp-python's sdist carries llama.cpp's whole
source under ``vendor/llama.cpp`` (``tools/server`` included). The env that runs this script
has ``gguf`` for the model; the binary lands in ``<env>/bin/llama-server``.

The rules it relies on:

- The source and the cmake build live in ``<cache>/build/llamacpp-server/`` (``<cache>`` is
  the env's parent), outside the env's temporary directory: a build that fails or is
  interrupted resumes from its object files on the next ``prepare`` instead of compiling
  again from scratch (~9 min on 2 cores at load 3-7), and an edit of this script (a new env)
  recompiles only what its flags change. ``sdist.txt`` there names the sdist the tree came
  from; another pin starts over. Delete that directory to reclaim its space (~260 MB).
- CPU only, statically linked against llama.cpp's own libraries, ``-march=native`` like the
  cached llama-cpp-python wheel (do not copy the cache to another CPU type); no web UI, no
  OpenSSL, no download of a prebuilt UI.

    <env>/bin/python llamacpp_build.py <env>
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


def _run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _unpack_source(work: Path) -> Path:
    """``<work>/llama.cpp``: llama.cpp's tree out of the sdist, reused while ``SDIST`` stays."""
    source, stamp = work / "llama.cpp", work / "sdist.txt"
    if (source / "CMakeLists.txt").is_file() and stamp.is_file() and stamp.read_text() == SDIST:
        return source
    shutil.rmtree(source, ignore_errors=True)  # another pin's tree and objects, if any
    shutil.rmtree(work / "build", ignore_errors=True)
    stamp.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        _run([*pip, "--disable-pip-version-check", "-d", tmp, SDIST])
        (archive,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(tmp, members=members, filter="data")
        (vendored,) = Path(tmp).glob("llama_cpp_python-*/vendor/llama.cpp")
        vendored.rename(source)
    stamp.write_text(SDIST)
    return source


def main() -> None:
    env = Path(sys.argv[1])
    work = env.parent / "build" / "llamacpp-server"
    work.mkdir(parents=True, exist_ok=True)
    source = _unpack_source(work)
    build = work / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run(["cmake", "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS])
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    _run(["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs])
    shutil.copy2(build / "bin" / "llama-server", env / "bin" / "llama-server")
    _run([str(env / "bin" / "llama-server"), "--version"])


if __name__ == "__main__":
    main()
