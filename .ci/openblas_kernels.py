"""Which OpenBLAS kernel set numpy and scipy run here, and which other set CI reruns under.

numpy and scipy wheels bundle OpenBLAS built with DYNAMIC_ARCH: it picks its kernels (GEMM, TRSM,
dot, ...) from the CPU at load time, and ``OPENBLAS_CORETYPE`` overrides the pick. Different
kernels round differently, so a tolerance that only holds for one kernel set fails on another
machine. ``.ci/run`` reruns the ``numerics`` tests under a second set chosen here.

    python .ci/openblas_kernels.py describe     # one line: each OpenBLAS and its kernel set
    python .ci/openblas_kernels.py pick         # the set for the second run, or nothing
    python .ci/openblas_kernels.py check NAME   # exit 1 unless every OpenBLAS runs NAME

The machine's own set is what OpenBLAS picks in the calling environment: when
``OPENBLAS_CORETYPE`` is already set there, that forced set counts as the machine's own.
"""

from __future__ import annotations

import platform
import sys

# Candidates in order of preference, with the CPU flags their kernels execute (OpenBLAS does
# not check them when forced: a set the CPU lacks dies with SIGILL). Zen runs Haswell's
# kernels, so a machine that reports Zen gets Sandybridge.
CANDIDATES = [("Haswell", {"avx2", "fma"}), ("Sandybridge", {"avx"}), ("Nehalem", {"sse4_2"})]
SAME_KERNELS = {"haswell": {"haswell", "zen"}}


def openblas_sets() -> list[tuple[str, str, str, int]]:
    """``(owner, version, kernel set, threads)`` of every OpenBLAS numpy and scipy loaded; the
    owner is the package whose wheel bundles it (``numpy.libs/``, ``scipy.libs/``), else the
    file."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_info

    out = []
    for i in threadpool_info():
        if i.get("internal_api") != "openblas":
            continue
        path = i["filepath"].replace("\\", "/")
        owner = next((p for p in ("numpy", "scipy") if f"/{p}.libs/" in path), path.rsplit("/", 1)[-1])
        out.append((owner, i.get("version") or "?", i.get("architecture") or "?", i.get("num_threads", 0)))
    return sorted(out)


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def pick(own: set[str], flags: set[str]) -> str | None:
    """The first candidate that differs from every set in ``own`` and that the CPU can run."""
    own = {o.lower() for o in own}
    for name, needs in CANDIDATES:
        if own & SAME_KERNELS.get(name.lower(), {name.lower()}):
            continue
        if needs <= flags:
            return name
    return None


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "describe"
    sets = openblas_sets()
    if cmd == "describe":
        print(
            ", ".join(f"{lib}'s OpenBLAS {ver}: {arch}, {n} thread(s)" for lib, ver, arch, n in sets)
            or "no OpenBLAS loaded"
        )
        return 0
    if cmd == "pick":
        if platform.machine().lower() not in ("x86_64", "amd64"):
            print(f"not x86-64 ({platform.machine()})", file=sys.stderr)
            return 0
        if not sets:
            print("numpy/scipy do not use OpenBLAS here", file=sys.stderr)
            return 0
        name = pick({arch for _, _, arch, _ in sets}, cpu_flags())
        if name is None:
            print("no other kernel set this CPU can run", file=sys.stderr)
        else:
            print(name)
        return 0
    if cmd == "check" and len(argv) == 3:
        wrong = [(lib, arch) for lib, _, arch, _ in sets if arch.lower() != argv[2].lower()]
        for lib, arch in wrong:
            print(f"{lib} runs {arch}, not {argv[2]}", file=sys.stderr)
        return 1 if wrong or not sets else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
