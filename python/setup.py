"""pip install ./python: the capstore package, with libcapstore.so bundled.

The library is the one the CMake build made (build/lib/libcapstore.so.MAJOR.MINOR
beside this directory, as ./dev.sh demo or ./dev.sh test build it), or the file
$CAPSTORE_LIBRARY names. Only Debian's setuptools is needed: there is no
pyproject.toml, so pip builds here without an isolated environment (which would
download setuptools). Without a library to bundle the install fails, saying so,
unless CAPSTORE_SYSTEM_LIBRARY=1 asks for the one the system's loader finds
(cmake --install).
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
            if os.environ.get("CAPSTORE_SYSTEM_LIBRARY") == "1":
                return  # asked for: the package loads the libcapstore.so the system's loader finds
            sys.exit("setup.py: no build/lib/libcapstore.so.* beside python/ to bundle: build it first "
                     "(./dev.sh demo), or name one with CAPSTORE_LIBRARY=, or set CAPSTORE_SYSTEM_LIBRARY=1 to "
                     "use the one installed on the system (cmake --install)")
        major_minor = ".".join(version().split(".")[:2])
        dest = os.path.join(self.build_lib, "capstore", "_lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copyfile(lib, os.path.join(dest, "libcapstore.so." + major_minor))
        print(f"setup.py: bundled {lib}", file=sys.stderr)


class BinaryDistribution(Distribution):
    """The wheel holds libcapstore.so: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildWithLibrary}
try:
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """A wheel for this platform (it holds libcapstore.so) but any Python 3 (ctypes: no extension module)."""

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = PlatformWheel
except ImportError:  # no wheel package: pip installs without building a wheel
    pass


setup(
    name="capstore",
    distclass=BinaryDistribution,
    version=version(),
    description="Capture tensors from model inference into packs on an object store; read them back as tensors",
    packages=["capstore"],
    package_data={"capstore": ["py.typed"]},
    python_requires=">=3.9",
    cmdclass=cmdclass,
    zip_safe=False,
)
