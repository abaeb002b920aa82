"""Build hook: the wheel carries the book's committed results, so a chapter runs without the repository.

`results/`, `benchmarks/results/` and `configs/` are copied into `transformer/book_files/` of the built package;
`transformer.viz.book_path` finds them there (or in the checkout, when the package runs from one).
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BOOK_FILES = {"results": ("*.json", "*.csv"), "benchmarks/results": ("*.json",), "configs": ("*.toml",)}


class BuildPyWithBookFiles(build_py):
    "build_py, then copy the book's result and configuration files into the package."

    def run(self):
        super().run()
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "transformer" / "book_files"
        shutil.rmtree(target, ignore_errors=True)  # an in-tree build/ may hold files deleted since
        for folder, patterns in BOOK_FILES.items():
            for pattern in patterns:
                for source in sorted((root / folder).rglob(pattern)):
                    copy = target / source.relative_to(root)
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, copy)


setup(cmdclass={"build_py": BuildPyWithBookFiles})
