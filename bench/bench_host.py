"""What the benchmarks print about the machine they ran on, shared by the bench/*.py scripts."""
import os


def cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model():
    """lscpu's model name, else what platform knows."""
    import platform
    import subprocess
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def cpu_line():
    """The CPU model, its core count and the vector extensions the kernels choose between."""
    flags = cpu_flags()
    ext = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{cpu_model()}, {os.cpu_count()} CPUs, {' '.join(ext) or 'no AVX2'}"
