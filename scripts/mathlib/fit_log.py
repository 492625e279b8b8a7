from remez import *
a, b = np.sqrt(0.5) - 1 - 1e-4, np.sqrt(2) - 1 + 1e-4
xs = grid(a, b); xs = xs[np.abs(xs) > 1e-6]
f = mpv(lambda t: (mp.log1p(t) - t) / t**2, xs)
w = xs**2 / np.abs(np.log1p(xs))
for deg in (6, 7, 8, 9):
    c, e = fit_f32(xs, f, w, list(range(deg + 1)))
    show(f"log1p P deg{deg}", c, e)
