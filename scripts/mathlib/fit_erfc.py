from remez import *
for A in (0.75, 0.875, 1.0):
    xs = grid(A, 4.0)
    f = mpv(lambda a: mp.erfc(a) * mp.exp(a * a), xs)
    w = np.exp(-xs**2)
    for deg in (7, 8, 9, 10, 11):
        c, e = fit_f32(xs, f, w, list(range(deg + 1)))
        c2, e2 = fit_f32(xs, f, w, list(range(deg + 1)), xform=lambda x: 1 / x)
        print(f"A={A} deg {deg}: poly(a) err 2^{np.log2(e):.2f}   poly(1/a) err 2^{np.log2(e2):.2f}")
