from remez import *
T = 0.5493 * 1.0 + 0.01
ss = grid(1e-8, T*T)
f = mpv(lambda s: (mp.tanh(mp.sqrt(s)) / mp.sqrt(s) - 1) / s, ss)
w = ss * np.sqrt(ss) / np.tanh(np.sqrt(ss))
for deg in (3, 4, 5):
    c, e = fit_f32(ss, f, w, list(range(deg + 1)))
    show(f"tanh T deg{deg} on [0,{T}]", c, e)
for A in (0.75, 0.875, 1.0):
    ss = grid(1e-8, A*A)
    f = mpv(lambda s: mp.erf(mp.sqrt(s)) / mp.sqrt(s) - 1, ss)
    w = np.sqrt(ss) / np.array([float(mp.erf(mp.sqrt(s))) for s in ss])
    for deg in (4, 5, 6, 7):
        c, e = fit_f32(ss, f, w, list(range(deg + 1)))
        show(f"erf E deg{deg} on [0,{A}]", c, e)
