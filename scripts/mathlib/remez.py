"""Discrete weighted minimax (Remez exchange) fits for thunder-c's mathlib.h, float64 solves,
mpmath-exact target values; coefficients rounded to float32 one at a time (lowest degree first)
with the remaining ones refitted."""
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def remez(xs, f, w, basis, fixed=None, iters=60):
    """min over c of max |w*(f - sum c_j basis_j - fixed)| on grid xs.  basis: list of arrays on xs"""
    n = len(basis)
    B = np.stack(basis, axis=1)  # (N, n)
    fv = f - (fixed if fixed is not None else 0.0)
    N = len(xs)
    idx = np.round(np.linspace(0, N - 1, n + 1)).astype(int)
    # chebyshev-like initial reference
    t = (1 - np.cos(np.pi * np.arange(n + 1) / n)) / 2
    idx = np.unique(np.round(t * (N - 1)).astype(int))
    if len(idx) < n + 1:
        idx = np.round(np.linspace(0, N - 1, n + 1)).astype(int)
    best = None
    for _ in range(iters):
        A = np.zeros((n + 1, n + 1))
        A[:, :n] = B[idx]
        A[:, n] = ((-1.0) ** np.arange(n + 1)) / w[idx]
        sol = np.linalg.solve(A, fv[idx])
        c, E = sol[:n], sol[n]
        e = w * (fv - B @ c)
        m = np.max(np.abs(e))
        if best is None or m < best[1]:
            best = (c, m)
        # new reference: alternating extrema
        s = np.sign(e)
        s[s == 0] = 1
        # split into runs of equal sign, pick max |e| in each run
        cand = []
        start = 0
        for i in range(1, N + 1):
            if i == N or s[i] != s[start]:
                j = start + np.argmax(np.abs(e[start:i]))
                cand.append(j)
                start = i
        cand = np.array(cand)
        # keep n+1 of them: drop smallest while too many (remove from ends or merge)
        while len(cand) > n + 1:
            a = np.abs(e[cand])
            if len(cand) - (n + 1) == 1:
                # drop an end
                if a[0] < a[-1]:
                    cand = cand[1:]
                else:
                    cand = cand[:-1]
            else:
                k = np.argmin(a)
                cand = np.delete(cand, k)
                # re-merge same-sign neighbours
                merged = [cand[0]]
                for j in cand[1:]:
                    if np.sign(e[j]) == np.sign(e[merged[-1]]):
                        if abs(e[j]) > abs(e[merged[-1]]):
                            merged[-1] = j
                    else:
                        merged.append(j)
                cand = np.array(merged)
        if len(cand) < n + 1:
            break
        if np.array_equal(np.sort(cand), idx) or abs(m - abs(E)) < 1e-6 * m:
            break
        idx = np.sort(cand)
    return best


def fit_f32(xs, f, w, powers, xform=lambda x: x, iters=60):
    """fit sum c_j * xform(x)**powers[j]; round to f32 one at a time. returns list of f32 coeffs and error"""
    u = xform(xs)
    basis = [u ** p for p in powers]
    fixed = np.zeros_like(xs)
    coeffs = []
    for j in range(len(powers)):
        c, m = remez(xs, f, w, basis[j:], fixed=fixed, iters=iters)
        cj = float(np.float32(c[0]))
        coeffs.append(cj)
        fixed = fixed + cj * basis[j]
    err = np.max(np.abs(w * (f - fixed)))
    return coeffs, err


def grid(a, b, n=6000):
    # chebyshev-clustered grid
    t = (1 - np.cos(np.pi * np.arange(n) / (n - 1))) / 2
    return a + (b - a) * t


def mpv(fn, xs):
    return np.array([float(fn(mp.mpf(float(x)))) for x in xs])


def show(name, coeffs, err):
    print(f"{name}: err {err:.3e} (2^{np.log2(err):.2f})")
    for c in coeffs:
        h = float(c).hex(); m, p = h.split("p"); m = m.rstrip("0").rstrip("."); print(f"   {m}p{p}f, /* {c:.9g} */")
