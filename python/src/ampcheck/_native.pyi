# Type stub of the extension module ampcheck._native (harness/python/native_module.cpp). Use ampcheck.api instead:
# these functions return the use cases' records as JSON text (summary.json's fields), which api.py types.
from typing import Callable

class Reference:
    @property
    def path(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def noise_labels(self) -> list[str]: ...

def load_reference(path: str) -> Reference: ...
def judge(
    run: str,
    reference: Reference,
    expect: str,
    strategy: str,
    first_steps: int,
    strict: bool,
    written_here: bool = False,
) -> str: ...
def make_reference(fp32_run: str, spread: list[str], out: str, force: bool) -> dict[str, str | int | list[str]]: ...
def validate(
    scenarios: list[str],
    suite: str,
    device: str,
    references: str,
    out_dir: str,
    steps: int,
    force: bool,
    plants: list[str],
    replays: int,
    log: Callable[[str], None] | None,
) -> str: ...
def version() -> str: ...
