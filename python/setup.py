"""Builds spccl_torch against a built libspccl.

SPCCL_LIB_DIR: the folder with libspccl.so (a build folder or an install's lib);
SPCCL_INCLUDE_DIR: spccl's public headers (default: ../include next to this file).
MPI's compile and link flags come from `mpicc --showme` (Open MPI), or from
SPCCL_MPI_INCLUDE_DIRS / SPCCL_MPI_LIBRARY_DIRS (colon-separated) when set.
SPCCL_NCCL_INCLUDE_DIR (and SPCCL_NCCL_LIB_DIR), set when libspccl was built
with its NCCL transport: the backend also moves CUDA tensors, over NCCL; this
needs torch's CUDA build and the CUDA toolkit (CUDA_HOME or nvcc on PATH).
"""
import os
import subprocess

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

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

nccl_include = os.environ.get("SPCCL_NCCL_INCLUDE_DIR")
if nccl_include and not torch.version.cuda:
    print("spccl_torch: this torch has no CUDA; building for CPU tensors only", flush=True)
    nccl_include = None
include_dirs = [include_dir] + _mpi("incdirs", "SPCCL_MPI_INCLUDE_DIRS")
library_dirs = [lib_dir] + _mpi("libdirs", "SPCCL_MPI_LIBRARY_DIRS")
libraries = ["spccl", "mpi"]
rpath = [lib_dir]
make = CppExtension
macros = []
if nccl_include:
    # CUDAExtension adds the toolkit's headers and torch's CUDA libraries; no
    # .cu file is compiled, so nvcc is not run.
    make = CUDAExtension
    macros = [("SPCCL_TORCH_CUDA", "1")]
    include_dirs.append(nccl_include)
    nccl_lib = os.environ.get("SPCCL_NCCL_LIB_DIR")
    if nccl_lib:
        library_dirs.append(nccl_lib)
        rpath.append(nccl_lib)
    libraries.append("nccl")

ext = make(
    "spccl_torch._C",
    [os.path.join("csrc", "spccl_backend.cpp")],
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    libraries=libraries,
    define_macros=macros,
    extra_compile_args={"cxx": ["-O2", "-Wall", "-Wno-unused-function"]},
    extra_link_args=[f"-Wl,-rpath,{d}" for d in rpath],
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
