"""thunder_c.transforms: trace -> trace transforms of the C core, for Trace objects (and autocast for
functions). Each returns a new Trace with its provenance line; the input is left as it was."""
from ._C import autocast, cse, dce, del_last_used

__all__ = ["autocast", "dce", "cse", "del_last_used"]
