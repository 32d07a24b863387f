"""Only the package list lives here; everything else is in pyproject.toml.

The shipped matrices and expectations (matrices/) travel inside the wheel as the package
data of ``harness.matrices``, so `dflash-matrix run <lane>` finds them in any env the wheel
is installed into (harness/bundled.py). pyproject.toml's ``packages.find`` cannot map a
folder outside ``harness/`` into the package; ``package_dir`` can.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["harness*"]), "harness.matrices", "harness.matrices.expectations"],
    package_dir={"harness.matrices": "matrices"},
)
