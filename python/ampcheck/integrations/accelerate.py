"""Accelerate custom loops: `ampcheck_recorder(accelerator, path, model, optimizer)` is a Recorder set up for an
`accelerate.Accelerator` loop — the torch optimizer inside accelerate's wrapper, the GradScaler accelerate made
(`accelerator.scaler`), the model unwrapped from a distributed wrapper — after `ampcheck.preflight` with the
accelerator's mixed precision (fp16 parameters with a GradScaler: the error run recorded and raised before any step).

    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    with ampcheck_recorder(accelerator, "runs/bf16.h5", model, optimizer) as rec:
        for batch in data:
            loss = model(**batch).loss
            accelerator.backward(loss)         # the Recorder's grad hooks read the grads here, before unscale
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step(); scheduler.step(); optimizer.zero_grad()
            rec.step(loss)
"""
from __future__ import annotations

from typing import Dict, Optional

from ampcheck.integrations._session import RecordingSession
from ampcheck.recorder import Recorder


def ampcheck_recorder(accelerator, path: str, model, optimizer, *, attributes: Optional[Dict[str, str]] = None,
                      run_preflight: bool = True, **recorder_kwargs) -> Recorder:
    mixed = str(accelerator.mixed_precision)
    session = RecordingSession(path, attributes=attributes, run_preflight=run_preflight, **recorder_kwargs)
    return session.start(accelerator.unwrap_model(model), optimizer, getattr(accelerator, "scaler", None),
                         mixed if mixed in ("fp16", "bf16") else None, f"accelerate {mixed}")
