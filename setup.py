# SPDX-License-Identifier: Apache-2.0
"""Build step of the Python package: CMake builds libtpx.so, libnccl-net-tpx.so
and the NIXL backend libplugin_TPX.so; they are copied into tpx/_lib of the
wheel. TPX_PREBUILT_LIBDIR=<build>/lib takes them from an existing build
instead (the test suite does that). The wheel is tagged py3-none-<platform>:
pure Python over a C ABI, but with native libraries inside."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBS = [("libtpx.so.0", "libtpx.so.0"), ("libnccl-net-tpx.so", "libnccl-net-tpx.so"),
        ("nixl/libplugin_TPX.so", "nixl/libplugin_TPX.so")]


def cmake_build(tmp):
    bdir = os.path.join(tmp, "cmake")
    subprocess.check_call(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                           "-DTPX_BUILD_TESTS=OFF", "-DTPX_BUILD_TOOLS=OFF"])
    subprocess.check_call(["cmake", "--build", bdir, "-j", str(os.cpu_count() or 2),
                           "--target", "tpx", "nccl-net-tpx", "plugin_TPX"])
    return os.path.join(bdir, "lib")


class BuildPy(build_py):
    def run(self):
        super().run()
        libdir = os.environ.get("TPX_PREBUILT_LIBDIR") or cmake_build(
            self.get_finalized_command("build").build_temp)
        dest = os.path.join(self.build_lib, "tpx", "_lib")
        os.makedirs(os.path.join(dest, "nixl"), exist_ok=True)
        for src, dst in LIBS:
            shutil.copyfile(os.path.realpath(os.path.join(libdir, src)), os.path.join(dest, dst))
            os.chmod(os.path.join(dest, dst), 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # native libraries inside: a platform wheel
        return True


class BdistWheel(bdist_wheel):
    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
