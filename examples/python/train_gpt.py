"""Training a small character-level GPT with thunder_c: the model is a plain nn.Module (nanoGPT-sized:
token and position embeddings, pre-norm blocks of causal self-attention and MLP, a final layer norm
and a language-model head tied to the token embedding), `thunder_c.jit(model)` compiles its forward
and backward, and an ordinary torch.optim.AdamW updates the parameters from the `.grad` that
`loss.backward()` fills.

    PYTHONPATH=build/python .venv/bin/python examples/python/train_gpt.py [TEXT_FILE]
        [--steps 300] [--batch 16] [--eager] [--lr 1e-3] [--seed 0]

TEXT_FILE defaults to /usr/share/common-licenses/GPL-3. The vocabulary is the file's characters. The
unigram entropy of the text (the loss of the best model that ignores context) is printed first; a model
that uses context goes clearly below it. --eager trains the same model with PyTorch alone, for
comparison; the last line reports tokens per second for the chosen mode.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.fc_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """forward(idx) -> logits (B, T, vocab); forward(idx, targets) -> the mean cross-entropy loss."""

    def __init__(self, vocab_size, n_layer=4, n_head=4, n_embd=128, block_size=64):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def unigram_entropy(data, vocab_size):
    """Entropy (nats) of the text's character frequencies: the cross-entropy of the best context-free model."""
    p = torch.bincount(data, minlength=vocab_size).double()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


def get_batch(data, batch, block, gen):
    ix = torch.randint(0, len(data) - block - 1, (batch,), generator=gen)
    x = torch.stack([data[i:i + block] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix.tolist()])
    return x, y


def bar(done, total, width=30):
    n = done * width // total
    return "[" + "#" * n + "." * (width - n) + "]"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text", nargs="?", default="/usr/share/common-licenses/GPL-3", help="a plain-text file")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--eager", action="store_true", help="train with PyTorch only (for comparison)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--executors", default=None,
                    help="thunder_c executors, comma-separated (e.g. fuser,blas,eager); default: thunder_c's")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be positive")

    with open(args.text, encoding="utf-8", errors="replace") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    block = 64
    if len(data) < block + 2:
        ap.error(f"{args.text}: too short ({len(data)} characters; need at least {block + 2})")
    h_unigram = unigram_entropy(data, len(chars))
    print(f"text: {args.text} ({len(data)} characters, vocabulary {len(chars)})")
    print(f"unigram entropy of the text: {h_unigram:.4f} nats (initial loss ~ ln({len(chars)}) = "
          f"{math.log(len(chars)):.4f})")

    torch.manual_seed(args.seed)
    model = GPT(len(chars), block_size=block)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    if args.eager:
        step_fn, mode = model, "eager (PyTorch)"
    else:
        import thunder_c
        execs = args.executors.split(",") if args.executors else None
        step_fn, mode = thunder_c.jit(model, executors=execs), "thunder_c"
    print(f"model: 4 layers, 4 heads, n_embd 128, block {block}, {nparams} parameters; mode: {mode}")

    gen = torch.Generator().manual_seed(args.seed)
    tty = sys.stdout.isatty()
    t_start = time.perf_counter()
    t_first = None
    losses = []
    for step in range(1, args.steps + 1):
        x, y = get_batch(data, args.batch, block, gen)
        loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 1:
            t_first = time.perf_counter()
        line = f"step {step:{len(str(args.steps))}d}/{args.steps} {bar(step, args.steps)} loss {losses[-1]:.4f}"
        if tty:  # one line redrawn in place; a line kept every 25 steps
            print("\r" + line, end="\n" if step % 25 == 0 or step == args.steps else "", flush=True)
        else:
            print(line, flush=True)
    t_end = time.perf_counter()

    tail = losses[-min(20, len(losses)):]
    final = sum(tail) / len(tail)
    tokens = args.batch * block
    print(f"mean loss of the last {len(tail)} steps: {final:.4f} nats; unigram entropy {h_unigram:.4f} "
          f"({'below' if final < h_unigram else 'NOT below'} by {h_unigram - final:+.4f})")
    rate_all = tokens * args.steps / (t_end - t_start)
    msg = f"{mode}: {rate_all:.0f} tokens/s over {args.steps} steps"
    if args.steps > 1:
        msg += f" ({tokens * (args.steps - 1) / (t_end - t_first):.0f} tokens/s after the first step, " \
               f"which took {t_first - t_start:.2f} s)"
    print(msg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
