"""Combines the "@" lines of bench_fusion, bench_fusion_torch.py, bench_gpt2 and bench_gpt2_torch.py
(files given on the command line, in any order) into the markdown tables of the fusion benchmark, with
the targets checked. Used by bench/run_fusion.sh; standard library only.

  @row <workload> <dtype> <floor|floor_stream|fused|unfused|torch|torch_copy> <min> <median> <max> <bytes> <regions>
  @gpt2 <dtype> <gemm_peak|gemm_floor|torch|executor list> <min> <median> <max> <regions> <GFLOP/s>
  @compile <program> <dtype> <executor list> <cold|warm_process|warm_same> <min> <median> <max> <regions> <.so>

Ratios are of medians unless marked "(of mins)"."""
import sys

# the fusion benchmark's targets: fused / bandwidth floor, and PyTorch eager / fused where one is given
FLOOR_TARGET = {"gelu_tanh": 1.3, "bias_gelu": 1.5, "softmax": 1.5, "layer_norm": 1.5, "rms_norm": 1.5}
TORCH_TARGET = {"gelu_tanh": 20.0}
GPT2_FLOOR_TARGET, GPT2_TORCH_TARGET = 1.2, 1.5
COLD_TARGET_MS, WARM_TARGET_MS = 2000.0, 50.0
ORDER = ["gelu_tanh", "bias_gelu", "softmax", "layer_norm", "rms_norm"]


def rank(workload):
    return ORDER.index(workload) if workload in ORDER else len(ORDER)


def read(paths):
    rows, gpt2, comp = {}, {}, {}
    for path in paths:
        with open(path) as f:
            for line in f:
                w = line.split()
                if not w:
                    continue
                if w[0] == "@row" and len(w) >= 9:
                    rows[(w[1], w[2], w[3])] = tuple(float(v) for v in w[4:7]) + (int(w[7]), w[8])
                elif w[0] == "@gpt2" and len(w) >= 8:
                    gpt2[(w[1], w[2])] = tuple(float(v) for v in w[3:6]) + (w[6], w[7])
                elif w[0] == "@compile" and len(w) >= 10:
                    comp[(w[1], w[2], w[3], w[4])] = tuple(float(v) for v in w[5:8]) + (w[8], w[9])
    return rows, gpt2, comp


def ms(t):
    return f"{t[1]:.2f}" if t else "—"


def ratio(a, b):
    return f"{a[1] / b[1]:.2f}x" if a and b else "—"


def mark(ok):
    return "yes" if ok else "**no**"


def fusion_table(rows):
    keys = sorted({(k[0], k[1]) for k in rows}, key=lambda k: (k[1] != "f32", rank(k[0])))
    if not keys:
        return
    print("### Memory-bound workloads (medians, ms)\n")
    print("| workload | dtype | floor (copy) | floor (stream) | fused | fusion regions | unfused | PyTorch eager | "
          "PyTorch copy_ | fused/floor | (of mins) | fused/stream floor | unfused/fused | PyTorch/fused | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for wl, dt in keys:
        g = lambda kind: rows.get((wl, dt, kind))
        fl, fs, fu, un, to, tc = g("floor"), g("floor_stream"), g("fused"), g("unfused"), g("torch"), g("torch_copy")
        target = []
        if fl and fu and wl in FLOOR_TARGET:
            target.append(f"/floor <= {FLOOR_TARGET[wl]}: {mark(fu[1] / fl[1] <= FLOOR_TARGET[wl])}")
        if to and fu and wl in TORCH_TARGET:
            target.append(f"PyTorch/fused >= {TORCH_TARGET[wl]:.0f}: {mark(to[1] / fu[1] >= TORCH_TARGET[wl])}")
        print(f"| {wl} | {dt} | {ms(fl)} | {ms(fs)} | {ms(fu)} | {fu[4] if fu else '—'} | {ms(un)} | {ms(to)} | "
              f"{ms(tc)} | {ratio(fu, fl)} | {f'{fu[0] / fl[0]:.2f}x' if fu and fl else '—'} | {ratio(fu, fs)} | "
              f"{ratio(un, fu)} | {ratio(to, fu)} | {'; '.join(target)} |")
    print()


def gpt2_table(gpt2):
    dts = sorted({k[0] for k in gpt2}, key=lambda d: d != "f32")
    if not dts:
        return
    print("### GPT-2 block forward, B=8 T=256 C=768 H=12 (ms)\n")
    print("| dtype | row | fusion regions | min / median / max | /GEMM floor | PyTorch/this | target |")
    print("|---|---|---|---|---|---|---|")
    for dt in dts:
        floor, torch = gpt2.get((dt, "gemm_floor")), gpt2.get((dt, "torch"))
        peak = gpt2.get((dt, "gemm_peak"))
        if floor:
            print(f"| {dt} | GEMM floor (block FLOPs at {float(floor[4]):.1f} GFLOP/s, the measured GEMM) | | "
                  f"{floor[1]:.1f} | 1.00x | | |")
        if peak:
            print(f"| {dt} | GEMM peak: the MLP's first linear alone | | {peak[0]:.1f} / {peak[1]:.1f} / {peak[2]:.1f} "
                  f"| | | |")
        names = [k[1] for k in gpt2 if k[0] == dt and k[1] not in ("gemm_floor", "gemm_peak", "torch")]
        for name in names + (["torch"] if torch else []):
            r = gpt2[(dt, name)]
            label = "PyTorch eager" if name == "torch" else f"thunder-c {name}"
            target = ""
            if "fuser" in name.split(",") or name == "default":
                parts = []
                if floor:
                    parts.append(f"/floor <= {GPT2_FLOOR_TARGET}: {mark(r[1] / floor[1] <= GPT2_FLOOR_TARGET)}")
                if torch:
                    parts.append(f"PyTorch/this >= {GPT2_TORCH_TARGET}: {mark(torch[1] / r[1] >= GPT2_TORCH_TARGET)}")
                target = "; ".join(parts)
            print(f"| {dt} | {label} | {r[3] if r[3] != '-' else ''} | {r[0]:.1f} / {r[1]:.1f} / {r[2]:.1f} | "
                  f"{ratio(r, floor)} | {ratio(torch, r)} | {target} |")
    print()


def compile_table(comp):
    keys = sorted({k[:3] for k in comp}, key=lambda k: (k[0] != "gpt2_block", k[1] != "f32", rank(k[0]), k[2]))
    if not keys:
        return
    print("### Compile time (th_program_compile, min / median / max ms)\n")
    print("| program | dtype | executors | fusion regions | kernels (.so) | cold: new process, empty cache | "
          "warm: new process | warm: same process | target (cold < 2 s, warm < 50 ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in keys:
        c, w, s = (comp.get(key + (kind,)) for kind in ("cold", "warm_process", "warm_same"))
        f = lambda t: f"{t[0]:.1f} / {t[1]:.1f} / {t[2]:.1f}" if t else "—"
        target = ""
        if c and w and ("fuser" in key[2].split(",") or key[2] == "default"):
            target = (f"cold {mark(c[1] < COLD_TARGET_MS)}, warm {mark(max(w[1], s[1] if s else 0) < WARM_TARGET_MS)}")
        reg = c or w or s
        print(f"| {key[0]} | {key[1]} | {key[2]} | {reg[3]} | {reg[4]} | {f(c)} | {f(w)} | {f(s)} | {target} |")
    print()


def main():
    rows, gpt2, comp = read(sys.argv[1:])
    fusion_table(rows)
    gpt2_table(gpt2)
    compile_table(comp)


if __name__ == "__main__":
    main()
