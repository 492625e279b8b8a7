"""The model zoo: every model thunder_c is tested on, built from a small config with seeded random
weights (nothing is downloaded), with its example inputs and how to run and train it.

A Spec builds a fresh model (`build()`, seeded, in float32, dropout and stochastic depth at 0 so that
eager and thunder_c compute the same function in training mode) and the inputs of one batch
(`batch()`, seeded). `forward(model, batch)` is the eval call whose outputs are compared;
`loss(model, batch)` is the scalar one train step differentiates. `llm` models also run a bfloat16
autocast forward. Used by test_models.py (the pytest suite), report.py (docs/models.md) and
scripts/demo.sh --model NAME.
"""
import dataclasses
import importlib
import os
import sys
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VOCAB = 128
BATCH, SEQ = 2, 16
IMAGE = 64  # torchvision inputs: 64x64 (ViT-B/16 and Swin-T take 224, see their specs)


@dataclasses.dataclass
class Spec:
    name: str
    family: str  # "transformers", "torchvision", "karpathy" (nanoGPT, minGPT, llama2.c), "litgpt", "torch.nn"
    build: Callable[[], nn.Module]
    batch: Callable[[], dict]
    forward: Callable[[nn.Module, dict], object]
    loss: Callable[[nn.Module, dict], torch.Tensor]
    llm: bool = False  # also a bfloat16 autocast forward
    tol: float = 1e-4  # float32: max |thunder_c - eager| / max(1, max |eager|) per compared tensor
    train_tol: float = 1e-3  # gradients and parameters after one SGD step, the same measure
    skip: Optional[str] = None  # why the model cannot be built here (a missing package)
    backend: bool = False  # test_models.py also runs forward and train through the torch.compile backend


def _seeded(fn):
    def build():
        torch.manual_seed(0)
        m = fn()
        for mod in m.modules():  # eager and thunder_c must compute the same function in train mode
            if isinstance(mod, nn.Dropout):
                mod.p = 0.0
            if type(mod).__name__ == "StochasticDepth":
                mod.p = 0.0
        return m.float()
    return build


def _tokens(seq=SEQ, vocab=VOCAB):
    def batch():
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, vocab, (BATCH, seq), generator=g)
        tgt = torch.randint(0, vocab, (BATCH, seq), generator=g)
        return {"ids": ids, "targets": tgt}
    return batch


def _images(size=IMAGE, classes=10, channels=3, n=BATCH):
    def batch():
        g = torch.Generator().manual_seed(1)
        return {"x": torch.randn(n, channels, size, size, generator=g),
                "targets": torch.randint(0, classes, (n,), generator=g)}
    return batch


def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


# ---- Hugging Face transformers ---------------------------------------------------------------------

def _hf(cls_name, cfg_name, attn="sdpa", **cfg):
    def build():
        import transformers
        config = getattr(transformers, cfg_name)(**cfg)
        config._attn_implementation = attn
        if hasattr(config, "use_cache"):  # a returned DynamicCache is not a tensor structure thunder_c returns
            config.use_cache = False
        return getattr(transformers, cls_name)(config)
    return _seeded(build)


def _hf_logits(m, b):
    # with the attention mask a tokenizer gives (without one, transformers' masking_utils looks for
    # packed sequences in the position ids: torch.diff and cumsum)
    return m(input_ids=b["ids"], attention_mask=torch.ones_like(b["ids"])).logits


def _hf_lm_loss(m, b):
    return _ce(_hf_logits(m, b), b["targets"])


_DEC = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_ENC = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)


def _seq2seq_forward(m, b):
    return m(input_ids=b["ids"], decoder_input_ids=b["targets"][:, :8]).logits


def _seq2seq_loss(m, b):
    return _ce(m(input_ids=b["ids"], decoder_input_ids=b["targets"][:, :8]).logits, b["targets"][:, 1:9])


def _whisper_batch():
    g = torch.Generator().manual_seed(1)
    return {"x": torch.randn(BATCH, 16, 64, generator=g), "ids": torch.randint(0, VOCAB, (BATCH, 8), generator=g),
            "targets": torch.randint(0, VOCAB, (BATCH, 8), generator=g)}


def _whisper_forward(m, b):
    return m(input_features=b["x"], decoder_input_ids=b["ids"]).logits


def _whisper_loss(m, b):
    return _ce(_whisper_forward(m, b), b["targets"])


def _vit_hf_forward(m, b):
    return m(pixel_values=b["x"]).logits


def _vit_hf_loss(m, b):
    return _ce(_vit_hf_forward(m, b), b["targets"])


# ---- torchvision -----------------------------------------------------------------------------------

def _tv(name, **kw):
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, num_classes=10, **kw)
    return _seeded(build)


def _call_x(m, b):
    return m(b["x"])


def _x_loss(m, b):
    return _ce(m(b["x"]), b["targets"])


# ---- Karpathy's nanoGPT, minGPT, llama2.c (faithful copies in this directory) -----------------------

def _nanogpt():
    import nanogpt
    return nanogpt.GPT(nanogpt.GPTConfig(block_size=64, vocab_size=VOCAB, n_layer=2, n_head=4, n_embd=64))


def _mingpt():
    import mingpt
    return mingpt.GPT(mingpt.GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, block_size=64))


def _llama2c():
    import llama2c
    return llama2c.Transformer(llama2c.ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB,
                                                 multiple_of=32, max_seq_len=64))


def _gpt_forward(m, b):
    return m(b["ids"])[0]  # (logits of the last position, None)


def _gpt_loss(m, b):
    return m(b["ids"], b["targets"])[1]


def _llama2c_forward(m, b):
    return m(b["ids"])


def _llama2c_loss(m, b):
    m(b["ids"], b["targets"])
    return m.last_loss  # llama2.c's forward stores the loss on the module


# ---- torch.nn layers -------------------------------------------------------------------------------

class _EncoderLM(nn.Module):
    """nn.TransformerEncoderLayer (batch_first, its MultiheadAttention with a causal attn_mask and a
    key_padding_mask) between an embedding and a head. is_causal=True says that the mask is causal
    (else nn.TransformerEncoder compares it with a causal mask in Python, a data-dependent branch)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 64)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True), 2,
                                         enable_nested_tensor=False)
        self.head = nn.Linear(64, VOCAB)

    def forward(self, ids):
        T = ids.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        pad = ids == 0
        return self.head(self.enc(self.emb(ids), mask=mask, src_key_padding_mask=pad, is_causal=True))


class _LSTMLM(nn.Module):
    """nn.LSTM (2 layers, batch_first) between an embedding and a head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.rnn = nn.LSTM(32, 48, num_layers=2, batch_first=True)
        self.head = nn.Linear(48, VOCAB)

    def forward(self, ids):
        y, _ = self.rnn(self.emb(ids))
        return self.head(y)


class _GRULM(_LSTMLM):
    """nn.GRU (bidirectional) between an embedding and a head."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(32, 24, num_layers=1, batch_first=True, bidirectional=True)


def _plain_forward(m, b):
    return m(b["ids"])


def _plain_loss(m, b):
    return _ce(m(b["ids"]), b["targets"])


# ---- LitGPT (litgpt.GPT, the pip package: requirements-nodeps.txt) ---------------------------------

def _litgpt(base, **cfg):
    """litgpt.GPT from litgpt's config of `base` (its family: norm, MLP, rope, attention variant) at
    zoo size: 2 layers, 64 wide, 64 positions, VOCAB tokens."""
    def build():
        from litgpt import GPT, Config
        return GPT(Config.from_name(base, n_layer=2, n_embd=64, n_head=4, block_size=64, vocab_size=VOCAB,
                                    padded_vocab_size=VOCAB, **cfg))
    return _seeded(build)


def _litgpt_spec(name, base, **cfg):
    skip = None if _has("litgpt") and _has("lightning") else (
        "litgpt is not installed (scripts/install-deps.sh installs it from requirements-nodeps.txt)")
    return Spec(name, "litgpt", _litgpt(base, **cfg), _tokens(), _plain_forward, _plain_loss, llm=True,
                backend=True, skip=skip)


def _has(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _lm(name, cls, cfg, **cfgkw):
    return Spec(name, "transformers", _hf(cls, cfg, **cfgkw), _tokens(), _hf_logits, _hf_lm_loss, llm=True)


_GEMMA2 = dict(_DEC, head_dim=16, sliding_window=8, attn="eager")  # transformers has no sdpa path for Gemma 2


SPECS = [
    # decoder-only language models (no convolution): first in line
    Spec("gpt2", "transformers", _hf("GPT2LMHeadModel", "GPT2Config", vocab_size=VOCAB, n_positions=64, n_embd=64,
                                     n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
         _tokens(), _hf_logits, _hf_lm_loss, llm=True),
    _lm("llama", "LlamaForCausalLM", "LlamaConfig", **_DEC),
    _lm("mistral", "MistralForCausalLM", "MistralConfig", **_DEC, sliding_window=None),
    _lm("qwen2", "Qwen2ForCausalLM", "Qwen2Config", **_DEC),
    _lm("qwen3", "Qwen3ForCausalLM", "Qwen3Config", **_DEC, head_dim=16),
    _lm("phi3", "Phi3ForCausalLM", "Phi3Config", **_DEC),
    _lm("gemma", "GemmaForCausalLM", "GemmaConfig", **_DEC, head_dim=16),
    _lm("gemma2", "Gemma2ForCausalLM", "Gemma2Config", **_GEMMA2),
    _lm("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, hidden_dropout=0.0,
        attention_dropout=0.0),
    _lm("opt", "OPTForCausalLM", "OPTConfig", vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0,
        attention_dropout=0.0, pad_token_id=1),
    Spec("nanogpt", "karpathy", _seeded(_nanogpt), _tokens(), _gpt_forward, _gpt_loss, llm=True),
    Spec("mingpt", "karpathy", _seeded(_mingpt), _tokens(), _gpt_forward, _gpt_loss, llm=True),
    Spec("llama2c", "karpathy", _seeded(_llama2c), _tokens(), _llama2c_forward, _llama2c_loss, llm=True),
    # GPT-NeoX / Pythia: LayerNorm, parallel residual, GELU MLP, rope on a quarter of each head
    _litgpt_spec("litgpt_pythia", "pythia-14m"),
    # Llama 3: RMSNorm, SwiGLU (LLaMAMLP), grouped-query attention (2 key/value heads), Llama 3's rope
    _litgpt_spec("litgpt_llama", "Llama-3.2-1B", n_query_groups=2, intermediate_size=128, head_size=None),
    # Phi-2: one LayerNorm shared by attention and MLP (parallel), tanh GELU, partial rope
    _litgpt_spec("litgpt_phi2", "phi-2", intermediate_size=128, head_size=None),
    # Gemma 2: RMSNorm with unit offset, GeGLU, scaled embeddings, post-norms, attention and final logit
    # soft-capping (attention by matmuls, k.mT), a sliding-window layer (its mask built in a Python loop)
    _litgpt_spec("litgpt_gemma2", "gemma-2-2b", n_query_groups=2, intermediate_size=128, head_size=16,
                 sliding_window_size=8),
    # encoders and encoder-decoders
    Spec("bert", "transformers", _hf("BertForMaskedLM", "BertConfig", **_ENC), _tokens(), _hf_logits, _hf_lm_loss),
    Spec("roberta", "transformers", _hf("RobertaForMaskedLM", "RobertaConfig", **{**_ENC, "pad_token_id": 1,
                                                                                 "max_position_embeddings": 80}),
         _tokens(), _hf_logits, _hf_lm_loss),
    Spec("distilbert", "transformers", _hf("DistilBertForMaskedLM", "DistilBertConfig", vocab_size=VOCAB, dim=64,
                                           n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64,
                                           dropout=0.0, attention_dropout=0.0), _tokens(), _hf_logits, _hf_lm_loss),
    Spec("t5", "transformers", _hf("T5ForConditionalGeneration", "T5Config", vocab_size=VOCAB, d_model=64, d_ff=128,
                                   d_kv=16, num_layers=2, num_heads=4, dropout_rate=0.0, decoder_start_token_id=0),
         _tokens(), _seq2seq_forward, _seq2seq_loss),
    Spec("bart", "transformers", _hf("BartForConditionalGeneration", "BartConfig", vocab_size=VOCAB, d_model=64,
                                     encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                     max_position_embeddings=64, dropout=0.0, attention_dropout=0.0),
         _tokens(), _seq2seq_forward, _seq2seq_loss),
    Spec("whisper", "transformers", _hf("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=VOCAB,
                                        d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                                        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                        num_mel_bins=16, max_source_positions=32, max_target_positions=32,
                                        dropout=0.0, attention_dropout=0.0, pad_token_id=0, bos_token_id=1,
                                        eos_token_id=2, decoder_start_token_id=1),
         _whisper_batch, _whisper_forward, _whisper_loss),
    Spec("vit_hf", "transformers", _hf("ViTForImageClassification", "ViTConfig", image_size=32, patch_size=8,
                                       hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0),
         _images(32), _vit_hf_forward, _vit_hf_loss),
    # torch.nn layers
    Spec("transformer_encoder", "torch.nn", _seeded(_EncoderLM), _tokens(), _plain_forward, _plain_loss),
    Spec("lstm", "torch.nn", _seeded(_LSTMLM), _tokens(), _plain_forward, _plain_loss),
    Spec("gru", "torch.nn", _seeded(_GRULM), _tokens(), _plain_forward, _plain_loss),
    # torchvision
    Spec("resnet18", "torchvision", _tv("resnet18"), _images(), _call_x, _x_loss),
    Spec("resnet50", "torchvision", _tv("resnet50"), _images(), _call_x, _x_loss),
    Spec("mobilenet_v3_small", "torchvision", _tv("mobilenet_v3_small"), _images(), _call_x, _x_loss),
    Spec("efficientnet_b0", "torchvision", _tv("efficientnet_b0"), _images(), _call_x, _x_loss),
    # (a batch of 8 gives the deep stages' batch norms enough values per channel that float32 resolves
    # the train step; at 2 a batch-norm output within float32's error of a ReLU's zero decides whole
    # channels' gradients)
    Spec("regnet_y_400mf", "torchvision", _tv("regnet_y_400mf"), _images(n=8), _call_x, _x_loss),
    Spec("vit_b_16", "torchvision", _tv("vit_b_16", image_size=32), _images(32), _call_x, _x_loss),
    Spec("convnext_tiny", "torchvision", _tv("convnext_tiny"), _images(), _call_x, _x_loss),
    Spec("swin_t", "torchvision", _tv("swin_t"), _images(), _call_x, _x_loss),
]

BY_NAME = {s.name: s for s in SPECS}


def get(name):
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(BY_NAME)}") from None
