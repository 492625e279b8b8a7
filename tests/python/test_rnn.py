"""nn.LSTM / nn.GRU / nn.RNN through thunder_c.jit against PyTorch eager: torch._VF.lstm, gru, rnn_tanh
and rnn_relu are recorded as ltorch.lstm / gru / rnn_tanh / rnn_relu (src/ops/torch/rnn.c), unrolled
over the time steps. Outputs, final states and every gradient are compared (float64, so the comparison
is about the formulas: gate order, directions, layers, projections), plus the float32 forward."""
import pytest
import torch

from conftest import import_thunder_c

thunder_c = import_thunder_c()

CASES = {
    "lstm_2layer_bidirectional_batch_first": lambda: torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True,
                                                                    batch_first=True),
    "lstm_proj_no_bias": lambda: torch.nn.LSTM(3, 5, proj_size=2, bias=False),
    "gru_2layer_bidirectional": lambda: torch.nn.GRU(3, 4, num_layers=2, bidirectional=True),
    "rnn_tanh_batch_first": lambda: torch.nn.RNN(3, 4, batch_first=True),
    "rnn_relu_2layer": lambda: torch.nn.RNN(3, 4, num_layers=2, nonlinearity="relu"),
}


def _pair(name, dtype):
    torch.manual_seed(0)
    m = CASES[name]().to(dtype)
    ref = CASES[name]().to(dtype)
    ref.load_state_dict(m.state_dict())
    return m, ref


def _states(name, m, n, dtype):
    d = 2 if m.bidirectional else 1
    h_size = m.proj_size if getattr(m, "proj_size", 0) else m.hidden_size
    h0 = torch.randn(m.num_layers * d, n, h_size, dtype=dtype)
    if isinstance(m, torch.nn.LSTM):
        return (h0, torch.randn(m.num_layers * d, n, m.hidden_size, dtype=dtype))
    return h0


def _flat(o):
    if isinstance(o, torch.Tensor):
        return [o]
    return [t for x in o for t in _flat(x)]


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_gradients_match_eager(name, with_state):
    m, ref = _pair(name, torch.float64)
    torch.manual_seed(1)
    x = torch.randn(2, 5, 3, dtype=torch.float64) if m.batch_first else torch.randn(5, 2, 3, dtype=torch.float64)
    args = (x, _states(name, m, 2, torch.float64)) if with_state else (x,)
    out = _flat(thunder_c.jit(m)(*args))
    rout = _flat(ref(*args))
    assert len(out) == len(rout)
    for a, b in zip(out, rout):
        torch.testing.assert_close(a, b)
    cot = [torch.randn_like(t) for t in rout]
    sum((a * c).sum() for a, c in zip(out, cot)).backward()
    sum((b * c).sum() for b, c in zip(rout, cot)).backward()
    for (pname, p), rp in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, rp.grad, msg=pname)


def test_float32_unbatched_lstm():
    m, ref = _pair("lstm_proj_no_bias", torch.float32)
    x = torch.randn(6, 3)
    with torch.no_grad():
        for a, b in zip(_flat(thunder_c.jit(m)(x)), _flat(ref(x))):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_dropout_between_layers_in_training():
    torch.manual_seed(0)
    m = torch.nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = torch.randn(5, 2, 3)
    out, _ = thunder_c.jit(m)(x)
    assert out.shape == (5, 2, 4)
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(thunder_c.jit(m)(x)[0], m(x)[0], rtol=1e-5, atol=1e-6)


def test_packed_sequence_overload_is_refused():
    """torch._VF.gru(data, batch_sizes, hx, params, ...) (what nn.GRU calls for a PackedSequence)."""
    m = torch.nn.GRU(3, 4)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(5, 2, 3), [5, 3])
    params = list(m.parameters())

    def f(data, batch_sizes, h0):
        return torch._VF.gru(data, batch_sizes, h0, params, True, 1, 0.0, False, False)

    with pytest.raises(NotImplementedError, match="packed sequences"):
        thunder_c.jit(f)(packed.data, packed.batch_sizes, torch.zeros(1, 2, 4))
