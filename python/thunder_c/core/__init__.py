"""Lightning Thunder's module layout, for code written against it (`from thunder.core.transforms import
autocast` becomes `from thunder_c.core.transforms import autocast`)."""
