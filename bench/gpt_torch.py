"""bench/gpt_torch.py — nanoGPT's GPT in PyTorch (dropout 0, attention written out as nanoGPT
does without flash attention: torch 1.13 has no scaled_dot_product_attention), the reference
for ct's GPT: tests/engine/make_reference.py builds its gradients from it, bench/gpt_train
times it. The token embedding is tied to the output layer, as in nanoGPT. GPT(..., sdpa=True)
computes attention with F.scaled_dot_product_attention(is_causal=True) instead, as nanoGPT does
where torch has it (2.0+), so torch on a GPU takes its flash kernel: bench/gpu_train's GPT row.
Not a training script: the benches and reference makers drive it."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    """nanoGPT's, without dropout."""

    def __init__(self, c, h, sdpa=False):
        super().__init__()
        self.c_attn, self.c_proj, self.n_head = nn.Linear(c, 3 * c), nn.Linear(c, c), h
        self.sdpa = sdpa

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1)
        att = att.masked_fill(mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, h, sdpa=False):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c), CausalSelfAttention(c, h, sdpa)
        self.ln_2, self.mlp = nn.LayerNorm(c), MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's model (dropout 0): the token embedding tied to the output layer."""

    def __init__(self, n_layer, n_head, n_embd, block_size, vocab, sdpa=False):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(n_embd, n_head, sdpa) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        t = self.transformer
        x = t.drop(t.wte(idx) + t.wpe(torch.arange(idx.size(1), device=idx.device)))
        for b in t.h:
            x = b(x)
        return self.lm_head(t.ln_f(x))
