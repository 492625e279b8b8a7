"""Thunder's `thunder.core.transforms` spelling of thunder_c.transforms."""
from ..transforms import autocast, cse, dce, del_last_used  # noqa: F401
