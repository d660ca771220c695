"""A failed build's log, summed up as the one line the terminal gets."""

from __future__ import annotations

import re

_FAILURES = (
    (r"Compatibility with CMake < 3\.5 has been removed",
     "CMake 4 refused an old cmake_minimum_required (CMAKE_POLICY_VERSION_MINIMUM=3.5 unset?)"),
    (r"unsupported (GNU|clang) version",
     "nvcc does not support this {0} compiler: load one your CUDA supports (module load GCC)"),
    (r"Could NOT find NCCL", "CMake found no NCCL (nccl.h and libnccl.so)"),
    (r'Unknown CMake command "hip_add_library"', "ROCm 6's HIP has no hip_add_library"),
    (r"Killed signal terminated program|cc1plus: out of memory",
     "the compiler was killed (out of memory?): retry with MAKEFLAGS=-j2"),
    (r"No space left on device", "the disk is full: free space in the temporary folder "
     "(TMPDIR) and the wheel cache (HPO_WHEEL_CACHE), or point them elsewhere"),
    (r"fatal error: ([\w./+-]+): No such file or directory", "missing header {0}"),
    (r"error: [‘']([\w:]+)[’'] (?:in namespace [‘']std[’'] does not name a type|is not a "
     r"member of [‘']std[’']|does not name a type|was not declared in this scope)",
     "{0} is undeclared (a missing #include?)"),
    (r"No CMAKE_(?:CXX|CUDA)_COMPILER could be found", "CMake found no compiler"),
    (r"No matching distribution found for (\S+)",
     "pip found no {0} (offline: is it in the wheelhouse?)"),
    (r"nvcc fatal\s*:\s*(.+)", "nvcc: {0}"),
    (r"CMake Error at ([^\n]+?):?\n\s*(.+)", "CMake error at {0}: {1}"),
    (r"error: (?!subprocess-exited-with-error)(.+)", "{0}"),
)


def summarize_failure(log: str) -> str:
    """The first known cause in a failed build's output, as one short phrase."""
    for pattern, message in _FAILURES:
        match = re.search(pattern, log)
        if match:
            return message.format(*(group.strip() for group in match.groups() if group))[:200]
    return "no known cause found"
