"""Rewrites a .cu file of kernels/cuda into C++ for the emulation build (stdout).

Two rewrites, nothing else: `extern __shared__ float smem[];` becomes a pointer to the emulated
block's dynamic shared memory, and every launch `Kernel<<<grid, block[, shared[, stream]]>>>(args)`
becomes `::emu::Launch("Kernel", dim3(grid), dim3(block), shared, stream, [=] { Kernel(args); })`
(the name for the launch log; the lambda copies the arguments, as a launch does, which graph
capture relies on).
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


def translate(source):
    source = source.replace(
        "extern __shared__ float smem[];",
        "float* smem = static_cast<float*>(::emu::DynamicSharedMemory());")
    launch = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;]*>)?)\s*<<<")
    out, pos = [], 0
    while True:
        match = launch.search(source, pos)
        if not match:
            out.append(source[pos:])
            return "".join(out)
        out.append(source[pos:match.start()])
        config_end = source.index(">>>", match.end())
        config = split_top_level(source[match.end():config_end])
        config += ["0", "nullptr"][len(config) - 2:]
        open_paren = config_end + 3
        if source[open_paren] != "(":
            sys.exit(f"translate_cu.py: no argument list after the launch at {match.start()}")
        depth, close = 0, open_paren
        while True:
            depth += {"(": 1, ")": -1}.get(source[close], 0)
            if depth == 0:
                break
            close += 1
        args = source[open_paren + 1:close]
        out.append(f"::emu::Launch(\"{match.group(1)}\", dim3({config[0]}), dim3({config[1]}), "
                   f"{config[2]}, "
                   f"{config[3]}, [=] {{ {match.group(1)}({args}); }})")
        pos = close + 1


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(translate(f.read()))
