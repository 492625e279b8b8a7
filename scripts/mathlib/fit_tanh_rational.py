"""The rational approximation in th_m_tanhf (src/executors/fuser/mathlib.h): tanh(x) = x P(s) / Q(s),
s = x^2, P of degree 4 and Q of degree 5 with P(0) = Q(0) = 1, minimax in the relative error on
s in [0, 9.15^2] (tanh rounds to 1 in float32 beyond x = 9.0109; the kernel clamps x at 9.1).

Method: the linearized rational Remez (Loeb) iteration. With the denominator of the last step Q0
fixed, P/Q - f = 0 is linear in the coefficients as f Q - P = 0, so each step is a linear weighted
minimax fit (remez.py) of f - 1 on the basis {s^j} (p_j) and {-f s^j} (q_j) with the weight
1 / (f Q0), which makes the residual the relative error of P/Q; it is repeated until Q settles.
The coefficients are then rounded to float32 one at a time, p1, q1, p2, q2, ..., refitting the
free ones after each, as for the other functions. Prints the float64 and the rounded fit's
relative error and the rounded coefficients. Run from this folder: /usr/bin/python3
fit_tanh_rational.py (about a minute). tests/unit/test_fuser_mathlib.c checks the result.
"""
from remez import *

C = 9.15
N, M = 4, 5
ss = grid(1e-10, C * C, 8000)
f = mpv(lambda s: mp.tanh(mp.sqrt(s)) / mp.sqrt(s), ss)  # tanh(x) / x
names = [("p", j) for j in range(1, N + 1)] + [("q", j) for j in range(1, M + 1)]


def column(k):
    t, j = k
    return ss**j if t == "p" else -f * ss**j


def fit(fixed, steps=15):
    """Loeb iteration for the coefficients not in fixed; returns all of them and the relative error"""
    free = [k for k in names if k not in fixed]
    fx = sum((fixed[k] * column(k) for k in fixed), np.zeros_like(ss))
    q0 = np.ones_like(ss)
    coef = dict(fixed)
    for _ in range(steps):
        if free:
            c, _ = remez(ss, f - 1.0, 1.0 / (f * q0), [column(k) for k in free], fixed=fx, iters=100)
            coef.update(zip(free, c))
        q0 = 1 + sum(coef[("q", j)] * ss**j for j in range(1, M + 1))
    p = 1 + sum(coef[("p", j)] * ss**j for j in range(1, N + 1))
    return coef, np.max(np.abs(p / q0 / f - 1))


_, rel = fit({})
print(f"tanh x P(x^2)/Q(x^2), degrees {N}/{M}, float64 coefficients: relative error 2^{np.log2(rel):.2f}")
fixed = {}
for j in range(1, max(N, M) + 1):
    for t, n in (("p", N), ("q", M)):
        if j <= n:
            coef, _ = fit(fixed)
            fixed[(t, j)] = float(np.float32(coef[(t, j)]))
_, rel = fit(fixed, steps=1)
print(f"float32 coefficients: relative error 2^{np.log2(rel):.2f}")
for t in ("p", "q"):
    show(f"{t.upper()} (constant term 1, then degree 1 up)", [fixed[k] for k in names if k[0] == t], rel)
