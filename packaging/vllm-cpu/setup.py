"""Builds the distribution of pyproject.toml, with ``vllm_cpu_extras.pth`` at the root of site-packages
(where Python's ``site`` module runs it at every start-up); setuptools has no declarative key for that."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "vllm_cpu_extras.pth"


class BuildWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(Path(__file__).parent / PTH), str(Path(self.build_lib) / PTH))


setup(cmdclass={"build_py": BuildWithPth})
