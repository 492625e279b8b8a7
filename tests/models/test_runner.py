"""The train check of runner.py catches a wrong gradient even where float32 rounding widens its
tolerance: the "compiled" model here is the eager model with one gradient made wrong by a hook
(nothing runs through thunder_c), checked as test_models.py checks thunder_c.

ResNet-50's train step at the zoo's size is the worst conditioned one in the zoo: eager float32 is
tens of per cent off float64 on some layer3 gradients, so the float32 comparison cannot see a bug
there (it is past runner.ILL_CONDITIONED, so only float64 decides); the float64 stage must. A bug
only in float32 code on a well-resolved gradient of a well-conditioned model must fail in the float32
stage.
"""
import pytest
import torch

import runner
import zoo


def _scaled_grad(param_name, factor, dtype=None):
    """A compile function: the model itself, with the gradient of one parameter times `factor`
    (only when the parameter has `dtype`, when given)."""
    def compile(model):
        p = dict(model.named_parameters())[param_name]
        if dtype is None or p.dtype == dtype:
            p.register_hook(lambda g: g * factor)
        return model
    return compile


def test_train_check_passes_eager_itself():
    # the reference's own float32 step is within its own error (no false alarm from the check itself)
    runner.check_train(zoo.get("resnet18"), compile=lambda m: m)


def test_train_check_catches_wrong_grad_hidden_by_float32_noise():
    # 2% off on the gradient that float32 resolves worst: only the float64 stage can see it
    name = "layer3.0.downsample.0.weight"
    with pytest.raises(runner.Mismatch) as exc:
        runner.check_train(zoo.get("resnet50"), compile=_scaled_grad(name, 1.02))
    assert exc.value.what == f"grad of {name} (float64)"


def test_train_check_catches_wrong_float32_grad():
    # 1% off in float32 only, on the gradient of the head (which float32 resolves to ~1e-5)
    with pytest.raises(runner.Mismatch) as exc:
        runner.check_train(zoo.get("resnet18"), compile=_scaled_grad("fc.weight", 1.01, torch.float32))
    assert exc.value.what == "grad of fc.weight"
