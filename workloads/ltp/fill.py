"""Bubble Filling: the PS's average of the workers' gradients when some chunks did not arrive.

Each element is averaged over the workers whose chunk holding it arrived: a hole in one worker's
gradient is filled with the mean of the other workers' values of that element. Why this and not
zeros or the worker's previous gradient: the workers' gradients are independent estimates of the
same expected gradient (each on its own batch), so the mean over the k of n that arrived is still
an unbiased estimate of it, only noisier (as with a batch k/n the size); zeros would shrink every
lost coordinate's step by the share lost (a biased, uneven learning rate), and last iteration's
gradient is stale by one step and costs a copy of every worker's gradient. Because the senders
send their chunks in independent random orders (sender.py), the workers' holes rarely coincide; an
element no worker delivered gets 0 (no step for it this iteration), and is counted apart.

When nothing is missing the average is computed exactly as the TCP path computes it
(`torch.stack(...).mean(0)` of the same values), so parameters match TCP's bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pcnlab.workloads.ltp.wire import Layout


@dataclass(frozen=True)
class Filled:
    average: "object"            # torch.Tensor, (total,)
    filled_elements: int         # holes filled, over all workers (each from the others' mean, or 0)
    zero_elements: int           # elements no worker delivered (their average is 0)


def bubble_fill(received: np.ndarray, chunk_mask: np.ndarray, layout: Layout) -> Filled:
    """`received`: float32 (workers, total), what arrived (anything where nothing did); `chunk_mask`:
    bool (workers, chunks), the chunks that arrived. The average is a torch tensor."""
    import torch

    grad = torch.from_numpy(received)
    if chunk_mask.all():
        return Filled(grad.mean(0), 0, 0)
    elements = torch.from_numpy(layout.element_mask(chunk_mask)).to(grad.dtype)
    counts = elements.sum(0)
    average = (grad * elements).sum(0) / counts.clamp(min=1.0)
    holes = int(elements.numel() - int(elements.sum()))
    return Filled(average, holes, int((counts == 0).sum()))
