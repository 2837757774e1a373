"""Ship the top-level data directories (cluster-configs/, job-templates/, node-scripts/) in the wheel as clusterkit/_data/."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("cluster-configs", "job-templates", "node-scripts")


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "clusterkit" / "_data" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / name, target, ignore=shutil.ignore_patterns("__pycache__"))


setup(cmdclass={"build_py": BuildWithData})
