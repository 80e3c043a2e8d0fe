#!/usr/bin/env python3
"""PyTorch reference figures for docs/cuda.md / docs/BENCHMARKS.md, on the same shapes as cuda_bench.

  python3 bench/cuda/torch_reference.py attention --batch 64 --context 4096
      torch.nn.functional.scaled_dot_product_attention for one decode query per sequence,
      32 query / 8 KV heads, head_dim 128, bf16, contiguous K/V: K/V bytes read per second.
  python3 bench/cuda/torch_reference.py decode
      eager batch-1 decoding of a Llama with cuda_bench's ~1.1B shapes (dim 2048, 16 layers,
      32/8 heads, hidden 8192, vocab 32000, bf16, random weights), contiguous K/V cache.

Needs torch with CUDA (not installed by tests/run.sh; nothing here runs in the test suite).
"""
import argparse
import sys
import time


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("torch_reference: PyTorch is not installed", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torch_reference: no CUDA device", file=sys.stderr)
        return 1
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["attention", "decode"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--peak-gbs", type=float, default=0.0)
    a = ap.parse_args()
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)

    def timed(fn, iters):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / iters

    if a.mode == "attention":
        B, L, H, KV, D = a.batch, a.context, 32, 8, 128
        q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
        k = torch.randn(B, KV, L, D, device=dev, dtype=dt)
        v = torch.randn(B, KV, L, D, device=dev, dtype=dt)
        sec = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 50)
        gbs = B * L * KV * D * 2 * 2 / sec / 1e9
        extra = f" = {100 * gbs / a.peak_gbs:.1f}% of {a.peak_gbs:.0f} GB/s" if a.peak_gbs else ""
        print(f"torch sdpa decode: batch {B} context {L}: {sec * 1e6:.1f} us, {gbs:.0f} GB/s{extra}")
        return 0

    dim, layers, H, KV, hidden, vocab, D = 2048, 16, 32, 8, 8192, 32000, 64
    W = lambda *s: (torch.randn(*s, device=dev, dtype=dt) / s[-1] ** 0.5)
    emb, out = W(vocab, dim), W(vocab, dim)
    ls = [dict(qkv=W((H + 2 * KV) * D, dim), o=W(dim, H * D), gu=W(2 * hidden, dim), down=W(dim, hidden),
               n1=torch.ones(dim, device=dev, dtype=dt), n2=torch.ones(dim, device=dev, dtype=dt)) for _ in range(layers)]
    ctx = 256
    kc = [torch.zeros(1, KV, ctx + 200, D, device=dev, dtype=dt) for _ in range(layers)]
    vc = [torch.zeros(1, KV, ctx + 200, D, device=dev, dtype=dt) for _ in range(layers)]
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device=dev).float() / D))
    weight_bytes = sum(t.numel() * 2 for t in [emb, out] + [w for l in ls for w in l.values()])

    def rms(x, w):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * w

    def rope(x, pos):
        f = pos * inv
        c, s = f.cos().to(dt), f.sin().to(dt)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)

    state = {"pos": ctx}

    @torch.no_grad()
    def step():
        pos = state["pos"]
        x = emb[7].view(1, 1, dim)
        for i, l in enumerate(ls):
            h = rms(x, l["n1"]) @ l["qkv"].T
            q, k, v = h.split([H * D, KV * D, KV * D], -1)
            q = rope(q.view(1, 1, H, D).transpose(1, 2), pos)
            kc[i][:, :, pos] = rope(k.view(1, 1, KV, D).transpose(1, 2), pos)[:, :, 0]
            vc[i][:, :, pos] = v.view(1, KV, D)
            a = F.scaled_dot_product_attention(q, kc[i][:, :, : pos + 1], vc[i][:, :, : pos + 1], enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(1, 1, H * D) @ l["o"].T
            g, u = (rms(x, l["n2"]) @ l["gu"].T).split([hidden, hidden], -1)
            x = x + (F.silu(g) * u) @ l["down"].T
        logits = rms(x, ls[0]["n1"]) @ out.T
        state["pos"] = ctx + (pos + 1 - ctx) % 150
        return logits

    sec = timed(step, 100)
    line = f"torch eager batch-1 decode: {sec * 1e6:.0f} us/token, weights {weight_bytes / 1e9:.2f} GB"
    if a.peak_gbs:
        bound = weight_bytes / (a.peak_gbs * 1e9)
        line += f", bound {bound * 1e6:.0f} us -> {100 * bound / sec:.1f}% of the bound"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
