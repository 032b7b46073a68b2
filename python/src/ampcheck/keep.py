"""Keep a module in FP32 in your own training script: the fix `ampcheck sweep --localize` names (issue 52).

    import ampcheck
    for name in ["model.layers.1.self_attn"]:      # the set the localization printed
        ampcheck.keep_fp32(model, name)            # before training: plain loop, HF Trainer, Lightning alike

Inside the module autocast is off and its floating inputs are cast to float32 (its parameters are made float32):
what the sweep's `keep_fp32` probes did. A block kept keeps its own operations too (an attention block's softmax /
SDPA, an MLP block's activation); a container (ModuleList, ModuleDict), never called itself, keeps each of its children.
Returns the handles; `.remove()` them to undo the hooks (the parameters stay float32).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from ampcheck.plan import is_container
from ampcheck.plan_hooks import cast_floating


def keep_fp32(model: torch.nn.Module, name: str) -> list[RemovableHandle]:
    """Runs model.get_submodule(name) ("" the whole model) in FP32 under autocast."""
    module = model.get_submodule(name)
    if is_container(module):  # a ModuleList / ModuleDict is never called: keep each of its children
        return [
            h for child, _ in module.named_children() for h in keep_fp32(model, f"{name}.{child}" if name else child)
        ]
    module.float()
    contexts: list[torch.autocast] = []

    def enter(_m: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        device = next((p.device.type for p in module.parameters()), "cuda" if torch.cuda.is_available() else "cpu")
        ctx = torch.autocast(device, enabled=False)
        ctx.__enter__()
        contexts.append(ctx)
        return cast_floating(args, torch.float32), cast_floating(kwargs, torch.float32)

    def leave(_m: torch.nn.Module, _args: Any, _out: Any) -> None:
        if contexts:
            contexts.pop().__exit__(None, None, None)

    return [
        module.register_forward_pre_hook(enter, with_kwargs=True),
        module.register_forward_hook(leave, always_call=True),
    ]
