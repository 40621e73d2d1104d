"""pip install ./python: the capstore package, with libcapstore.so bundled.

The library is the one the CMake build made (build/lib/libcapstore.so.MAJOR.MINOR
beside this directory, as ./dev.sh demo or ./dev.sh test build it), or the file
$CAPSTORE_LIBRARY names. Only Debian's setuptools is needed: there is no
pyproject.toml, so pip builds here without an isolated environment (which would
download setuptools). Without a library to bundle the package relies on one the
system's loader finds (cmake --install), and says so at install.
"""

import glob
import os
import re
import shutil
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def version():
    try:
        with open(os.path.join(TOP, "CMakeLists.txt")) as f:
            return re.search(r"project\(capstore VERSION ([0-9.]+)", f.read()).group(1)
    except (OSError, AttributeError):
        return "0.1.0"


def library():
    env = os.environ.get("CAPSTORE_LIBRARY")
    if env:
        if not os.path.isfile(env):
            sys.exit(f"setup.py: CAPSTORE_LIBRARY={env} is not a file")
        return env
    found = [p for p in glob.glob(os.path.join(TOP, "build", "lib", "libcapstore.so.*.*.*")) if os.path.isfile(p)]
    return max(found, key=os.path.getmtime) if found else None


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        lib = library()
        if lib is None:
            print("setup.py: no build/lib/libcapstore.so.* to bundle (build it first: ./dev.sh demo); the package "
                  "will load the one the system's loader finds", file=sys.stderr)
            return
        major_minor = ".".join(version().split(".")[:2])
        dest = os.path.join(self.build_lib, "capstore", "_lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copyfile(lib, os.path.join(dest, "libcapstore.so." + major_minor))
        print(f"setup.py: bundled {lib}", file=sys.stderr)


class BinaryDistribution(Distribution):
    """The wheel holds libcapstore.so: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(
    name="capstore",
    distclass=BinaryDistribution,
    version=version(),
    description="Capture tensors from model inference into packs on an object store; read them back as tensors",
    packages=["capstore"],
    package_data={"capstore": ["py.typed"]},
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithLibrary},
    zip_safe=False,
)
