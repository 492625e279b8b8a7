from remez import *
import sys
# exp: e^r = 1 + r + r^2 Q(r), r in [-R, R]
R = 0.3466 * 1.005
xs = grid(-R, R); xs = xs[np.abs(xs) > 1e-6]
for deg in (3, 4, 5):
    f = mpv(lambda r: (mp.exp(r) - 1 - r) / r**2, xs)
    w = xs**2 / np.exp(xs)
    c, e = fit_f32(xs, f, w, list(range(deg + 1)))
    show(f"exp Q deg{deg}", c, e)
    w2 = xs**2 / np.abs(np.expm1(xs))
    c, e = fit_f32(xs, f, w2, list(range(deg + 1)))
    show(f"expm1 Q deg{deg}", c, e)
# exp2: 2^r = 1 + r*Q(r), r in [-0.5,0.5]
xs = grid(-0.5, 0.5); xs = xs[np.abs(xs) > 1e-6]
for deg in (4, 5, 6):
    f = mpv(lambda r: (mp.power(2, r) - 1) / r, xs)
    w = np.abs(xs) / 2**xs
    c, e = fit_f32(xs, f, w, list(range(deg + 1)))
    show(f"exp2 Q deg{deg}", c, e)
