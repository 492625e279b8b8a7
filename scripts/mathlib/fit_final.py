from remez import *
def cond(c, us, f):
    s = np.max(np.sum([abs(cj) * np.abs(us)**j for j, cj in enumerate(c)], axis=0) / np.abs(f))
    return s
# erf big, A = 1
xs = grid(1.0, 4.0)
f = mpv(lambda a: mp.erfc(a) * mp.exp(a * a), xs)
w = np.exp(-xs**2)
for deg in (7, 8):
  c, e = fit_f32(xs, f, w, list(range(deg + 1)), xform=lambda x: 1 / x)
  show(f"erfc G(1/a) deg{deg} on [1,4]", c, e); print("cond", cond(c, 1/xs, f))
  c, e = fit_f32(xs, f, w, list(range(deg + 1)))
  show(f"erfc G(a) deg{deg} on [1,4]", c, e); print("cond", cond(c, xs, f))
ss = grid(1e-8, 1.0)
f = mpv(lambda s: mp.erf(mp.sqrt(s)) / mp.sqrt(s) - 1, ss)
w = np.sqrt(ss) / np.array([float(mp.erf(mp.sqrt(s))) for s in ss])
c, e = fit_f32(ss, f, w, list(range(7)))
show("erf E deg6 on [0,1]", c, e)
T = 0.5593
ss = grid(1e-8, T*T)
f = mpv(lambda s: (mp.tanh(mp.sqrt(s)) / mp.sqrt(s) - 1) / s, ss)
w = ss * np.sqrt(ss) / np.tanh(np.sqrt(ss))
c, e = fit_f32(ss, f, w, list(range(5)))
show(f"tanh T deg4 on [0,{T}]", c, e)
