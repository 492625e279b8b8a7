from remez import *
for T in (0.8, 0.9, 1.0):
    ss = grid(1e-8, T*T)
    f = mpv(lambda s: (mp.tanh(mp.sqrt(s)) / mp.sqrt(s) - 1) / s, ss)
    w = ss * np.sqrt(ss) / np.tanh(np.sqrt(ss))
    for deg in (5, 6, 7, 8):
        c, e = fit_f32(ss, f, w, list(range(deg + 1)))
        show(f"tanh T deg{deg} on [0,{T}]", c, e)
