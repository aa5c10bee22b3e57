"""The reference trainer's model and data: a small decoder-only transformer (GPT-style) over bytes,
and a byte corpus every machine has (the Python standard library's sources) or the user's file."""

from __future__ import annotations

import math
import sysconfig
from pathlib import Path
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # bytes


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` pre-norm blocks, a final norm and an output layer."""

    def __init__(self, dim: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight"))
                                else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def load_corpus(path: Optional[str], limit_bytes: int) -> torch.Tensor:
    """Bytes to train on: ``path`` (a text file, or a file of uint8 tokens), else the sources of
    the running Python's standard library in sorted order, up to ``limit_bytes``."""
    if path:
        data = Path(path).read_bytes()[:limit_bytes]
    else:
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        chunks, size = [], 0
        for f in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
            b = f.read_bytes()
            chunks.append(b)
            size += len(b)
            if size >= limit_bytes:
                break
        data = b"".join(chunks)[:limit_bytes]
    if len(data) < 4096:
        raise ValueError(f"the corpus holds {len(data)} bytes; it needs at least 4096")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)


class Batches:
    """Random windows of the training part of the corpus (all but its last 5%), drawn by this
    node's own generator, so every node trains on its own sample; ``eval_batch`` is a fixed batch of
    the held-out 5%, the same on every node."""

    def __init__(self, corpus: torch.Tensor, seq_len: int, seed: int) -> None:
        split = int(len(corpus) * 0.95)
        self.train, self.held_out, self.seq_len = corpus[:split], corpus[split:], seq_len
        self.gen = torch.Generator().manual_seed(seed)

    def reseed(self, seed: int) -> None:
        self.gen.manual_seed(seed)

    def _windows(self, data: torch.Tensor, starts: torch.Tensor):
        offsets = starts[:, None] + torch.arange(self.seq_len + 1)
        w = data[offsets]
        return w[:, :-1], w[:, 1:]

    def next(self, batch: int):
        return self._windows(self.train, torch.randint(len(self.train) - self.seq_len - 1, (batch,), generator=self.gen))

    def eval_batch(self, batch: int):
        gen = torch.Generator().manual_seed(1234)
        return self._windows(self.held_out, torch.randint(len(self.held_out) - self.seq_len - 1, (batch,), generator=gen))
