"""gpu_peer.py: what the PyTorch peers that time a GPU share (torch_attention.py,
torch_newton_schulz.py, torch_gpt2.py): torch and its GPU, or the reason a peer skips, and the
best time per call of a function. Imported from the peers' own folder (python3 puts a script's
folder first on its path).
"""
import time


def gpu_torch(script):
    """torch when it imports and sees a GPU; else None, having said why `script` skips."""
    try:
        import torch
    except ImportError:
        print(f"{script}: skipped: python3 cannot import torch")
        return None
    if not torch.cuda.is_available():
        print(f"{script}: skipped: torch sees no GPU")
        return None
    return torch


def best_of(torch, fn, repeats, calls, warmups=1):
    """The best over `repeats` of the mean seconds per call of `calls` calls of fn, after
    `warmups` calls (the allocator, the backend's choices, clocks)."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best
