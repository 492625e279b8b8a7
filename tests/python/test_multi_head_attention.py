"""F.multi_head_attention_forward (ltorch.multi_head_attention_forward, src/ops/torch/rnn.c) and
nn.MultiheadAttention through thunder_c.jit against PyTorch eager: the samples of PyTorch's OpInfo
nn.functional.multi_head_attention_forward (its op is a seeded wrapper, so test_opinfo.py does not map
it; dropout samples run with training=False here, since thunder-c's dropout masks are not eager's),
forward in float32/float64/bfloat16 and gradients in float64, then the module's own paths (batch_first,
bool and float masks, need_weights with and without head averaging, kdim/vdim, unbatched input)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

OPINFO = next(o for o in op_db if o.name == "nn.functional.multi_head_attention_forward")
# float32: the OpInfo's own override (atol 5e-3), and rtol 2e-4 for outputs in the hundreds (its inputs reach
# 9 in magnitude): float32 GEMMs in another order differ by that much
TOL = {torch.float32: dict(rtol=2e-4, atol=5e-3), torch.float64: dict(rtol=1e-7, atol=1e-7),
       torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}


def _samples(dtype, requires_grad=False):
    torch.manual_seed(0)
    for s in OPINFO.sample_inputs("cpu", dtype, requires_grad=requires_grad):
        kwargs = dict(s.kwargs)
        kwargs["training"] = False
        yield s.input, s.args, kwargs


def _jit_mha():
    return thunder_c.jit(lambda *a, **k: F.multi_head_attention_forward(*a, **k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_opinfo_samples_forward(dtype):
    n = 0
    for q, args, kwargs in _samples(dtype):
        ref = F.multi_head_attention_forward(q, *args, **kwargs)
        got = _jit_mha()(q, *args, **kwargs)
        assert len(got) == 2
        torch.testing.assert_close(got[0], ref[0], **TOL[dtype])
        torch.testing.assert_close(got[1], ref[1], **TOL[dtype])  # need_weights: the head average
        n += 1
    assert n > 0


def test_opinfo_samples_gradients():
    for q, args, kwargs in _samples(torch.float64, requires_grad=True):
        tensors = [t for t in (q, *args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.requires_grad]
        ref = F.multi_head_attention_forward(q, *args, **kwargs)
        got = _jit_mha()(q, *args, **kwargs)
        torch.manual_seed(1)
        cot = [torch.randn_like(r) for r in ref]
        gref = torch.autograd.grad(ref, tensors, cot, allow_unused=True)
        ggot = torch.autograd.grad(got, tensors, cot, allow_unused=True)
        for a, b in zip(ggot, gref):
            if b is None:
                assert a is None or not a.any()
            else:
                torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-7)


def _module_case(mha, *args, **kwargs):
    torch.manual_seed(2)
    jm = thunder_c.jit(mha)
    ref = mha(*args, **kwargs)
    got = jm(*args, **kwargs)
    for g, r in zip(got, ref):
        if r is None:
            assert g is None
        else:
            torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    return jm


@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_module_self_attention_batch_first_with_masks(need_weights, average):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(3, 7, 16)
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[0, 5:] = True
    with torch.no_grad():
        _module_case(mha, x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=need_weights,
                     average_attn_weights=average)


def test_module_cross_attention_kdim_vdim_bias_kv_zero_attn_and_backward():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=6, add_bias_kv=True, add_zero_attn=True)
    ref_mha = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=6, add_bias_kv=True, add_zero_attn=True)
    ref_mha.load_state_dict(mha.state_dict())
    q, k, v = torch.randn(4, 2, 8), torch.randn(6, 2, 5), torch.randn(6, 2, 6)
    mask = torch.randn(4, 6)
    out, w = thunder_c.jit(mha)(q, k, v, attn_mask=mask)
    rout, rw = ref_mha(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, rout, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w, rw, rtol=1e-5, atol=1e-5)
    (out.sum() + w.square().sum()).backward()
    (rout.sum() + rw.square().sum()).backward()
    for (name, p), rp in zip(mha.named_parameters(), ref_mha.parameters()):
        torch.testing.assert_close(p.grad, rp.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_module_unbatched_and_is_causal_without_weights():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(12, 3).eval()
    x = torch.randn(5, 12)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        _module_case(mha, x, x, x)
        _module_case(mha, x, x, x, attn_mask=causal, is_causal=True, need_weights=False)


def test_bad_inputs_raise_as_eager():
    q = torch.randn(4, 2, 8)
    w_in, w_out = torch.randn(24, 8), torch.randn(8, 8)
    jf = _jit_mha()
    with pytest.raises(RuntimeError, match="was expecting embedding dimension of 6"):
        jf(q, q, q, 6, 2, w_in, None, None, None, False, 0.0, w_out, None)
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        jf(q, q, q, 8, 2, w_in, None, None, None, False, 0.0, w_out, None, attn_mask=torch.zeros(3, 4))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        jf(q, q, q, 8, 2, w_in, None, None, None, False, 0.0, w_out, None, is_causal=True)
    with pytest.raises(ValueError, match="only bool and floating types of attn_mask"):
        jf(q, q, q, 8, 2, w_in, None, None, None, False, 0.0, w_out, None, attn_mask=torch.zeros(4, 4, dtype=torch.int64))
