"""What every integration does at the start of training: a Recorder over the torch optimizer inside the framework's
wrapper, then `ampcheck.preflight` — a setup PyTorch will refuse is recorded as the error run and raised before any
step."""
from __future__ import annotations

from typing import Dict, List, Optional

from ampcheck.preflight import PreflightError, PreflightFinding, preflight
from ampcheck.recorder import Recorder, unwrap_optimizer


class RecordingSession:
    def __init__(self, path: str, *, attributes: Optional[Dict[str, str]] = None, probe_every: int = 1,
                 overwrite: bool = False, run_preflight: bool = True, snapshot_every: Optional[int] = None):
        self.path, self.attributes, self.probe_every, self.overwrite = path, dict(attributes or {}), probe_every, overwrite
        self.run_preflight, self.snapshot_every = run_preflight, snapshot_every
        self.recorder: Optional[Recorder] = None
        self.findings: List[PreflightFinding] = []

    def start(self, model, optimizer, scaler, mixed_precision: Optional[str], strategy: str) -> Recorder:
        """The Recorder (`optimizer` may be a framework's wrapper: the Recorder unwraps it and names it), then preflight."""
        attrs = {"strategy": strategy}
        attrs.update(self.attributes)
        self.recorder = Recorder(self.path, model, optimizer, scaler, attributes=attrs, probe_every=self.probe_every,
                                 overwrite=self.overwrite, snapshot_every=self.snapshot_every)
        if self.run_preflight:
            inner = unwrap_optimizer(optimizer) if optimizer is not None else None
            try:
                self.findings = preflight(model, inner, scaler=scaler, mixed_precision=mixed_precision)
            except PreflightError as e:
                self.findings = e.findings
                self.recorder._finish(e)  # the error run, with PyTorch's text, before any step
                raise
        return self.recorder

    def open(self) -> bool:
        return self.recorder is not None and not self.recorder._closed
