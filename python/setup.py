"""Builds spccl_torch against a built libspccl.

SPCCL_LIB_DIR: the folder with libspccl.so (a build folder or an install's lib);
SPCCL_INCLUDE_DIR: spccl's public headers (default: ../include next to this file).
MPI's compile and link flags come from `mpicc --showme` (Open MPI), or from
SPCCL_MPI_INCLUDE_DIRS / SPCCL_MPI_LIBRARY_DIRS (colon-separated) when set.
"""
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))


def _mpi(kind, env):
    if os.environ.get(env):
        return [p for p in os.environ[env].split(":") if p]
    try:
        out = subprocess.check_output(["mpicc", "--showme:" + kind], text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise RuntimeError(f"spccl_torch: set {env} or put Open MPI's mpicc on PATH ({err})")
    return out.split()


lib_dir = os.environ.get("SPCCL_LIB_DIR")
if not lib_dir:
    raise RuntimeError("spccl_torch: set SPCCL_LIB_DIR to the folder that holds libspccl.so")
lib_dir = os.path.abspath(lib_dir)
include_dir = os.path.abspath(os.environ.get("SPCCL_INCLUDE_DIR", os.path.join(here, "..", "include")))

ext = CppExtension(
    "spccl_torch._C",
    [os.path.join("csrc", "spccl_backend.cpp")],
    include_dirs=[include_dir] + _mpi("incdirs", "SPCCL_MPI_INCLUDE_DIRS"),
    library_dirs=[lib_dir] + _mpi("libdirs", "SPCCL_MPI_LIBRARY_DIRS"),
    libraries=["spccl", "mpi"],
    extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"],
    extra_link_args=[f"-Wl,-rpath,{lib_dir}"],
)

setup(
    name="spccl-torch",
    version="0.1.0",
    description="spccl as a torch.distributed backend, a DCT comm hook for DDP, a compressed alltoall op",
    packages=["spccl_torch"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    entry_points={"torch.distributed.backends": ["spccl = spccl_torch:_register_backend"]},
    python_requires=">=3.9",
)
