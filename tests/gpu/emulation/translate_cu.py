"""Rewrites a .cu file of kernels/cuda into C++ for the emulation build (stdout).

Two rewrites, nothing else: `extern __shared__ float smem[];` becomes a pointer to the emulated
block's dynamic shared memory, and every launch
`LaunchDependent(Kernel, grid, block, shared, stream, args...)` (kernels/cuda/dependent_launch.cuh)
becomes `::emu::Launch("Kernel", dim3(grid), dim3(block), shared, stream, [=] { Kernel(args); },
::linserve::cuda::LaunchesAsDependent(stream))` (the name for the launch log; the lambda copies the
arguments, as a launch does, which graph capture relies on). A `<<<...>>>` launch is refused:
every kernel launches through LaunchDependent.
"""

import re
import sys


def split_top_level(text):
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def translate(source, path):
    source = source.replace(
        "extern __shared__ float smem[];",
        "float* smem = static_cast<float*>(::emu::DynamicSharedMemory());")
    if "<<<" in source:
        sys.exit(f"translate_cu.py: {path}: a <<<...>>> launch; launch through LaunchDependent "
                 "(kernels/cuda/dependent_launch.cuh)")
    launch = re.compile(r"\bLaunchDependent\(")
    out, pos = [], 0
    while True:
        match = launch.search(source, pos)
        if not match:
            out.append(source[pos:])
            return "".join(out)
        out.append(source[pos:match.start()])
        depth, close = 0, match.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(source[close], 0)
            if depth == 0:
                break
            close += 1
        parts = split_top_level(source[match.end():close])
        if len(parts) < 5:
            sys.exit(f"translate_cu.py: {path}: LaunchDependent needs a kernel, grid, block, "
                     f"shared bytes and stream, at offset {match.start()}")
        kernel, grid, block, shared, stream = parts[:5]
        args = ", ".join(parts[5:])
        out.append(f"::emu::Launch(\"{kernel}\", dim3({grid}), dim3({block}), {shared}, {stream}, "
                   f"[=] {{ {kernel}({args}); }}, ::linserve::cuda::LaunchesAsDependent({stream}))")
        pos = close + 1


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(translate(f.read(), sys.argv[1]))
