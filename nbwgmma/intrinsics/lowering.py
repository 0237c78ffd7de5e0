"""A linear-time replacement for one step of numba-cuda's lowering, which was quadratic in the
size of a block.

Before it lowers a function, numba-cuda's ``Lower`` finds the variables assigned once
(``_find_singly_assigned_variable``): for every variable defined in one block and used only
there, it lists all of that block's assignments again to count the variable's. A fragment
unrolled at compile time (an epilogue over a 64 x 256 accumulator, a reduction over its 128
values) is one block of thousands of assignments, so that step took seconds: 21 of the 47 s
a row log-sum-exp over a 64 x 256 fragment took to compile. :func:`install` puts in its place
the same computation with each block's assignments counted once, where numba-cuda's method is
the one it was written against (its source text is checked); with any other, it changes
nothing. The set it computes is the same, so the code generated is the same.
"""

from __future__ import annotations

import hashlib
import inspect
from collections import Counter, defaultdict

__all__ = ["install"]

#: sha256 (first 16 hex digits) of the source of the numba-cuda method replaced (0.30.x)
REPLACED = "c3b499f765172885"


def _singly_assigned(original, ir, compute_use_defs, must_use_alloca):
    def _find_singly_assigned_variable(self):
        sav = set()
        if not self.func_ir.func_id.is_generator:
            use_defs = compute_use_defs(self.func_ir.blocks)
            alloca_vars = must_use_alloca(self.func_ir.blocks)
            var_assign_map = defaultdict(set)
            for blk, vl in use_defs.defmap.items():
                for var in vl:
                    var_assign_map[var].add(blk)
            used_in = set()  # variables a block uses that it did not define first
            for vl in use_defs.usemap.values():
                used_in.update(vl)
            counts: dict = {}  # block -> assignments per target name
            for var, defblks in var_assign_map.items():
                if var in alloca_vars or len(defblks) != 1 or var in used_in:
                    continue
                [defblk] = defblks
                c = counts.get(defblk)
                if c is None:
                    c = counts[defblk] = Counter(s.target.name for s in self.blocks[defblk].find_insts(ir.assign_types))
                if c[var] == 1:
                    sav.add(var)
        self._singly_assigned_vars = sav
        self._blk_local_varmap = {}

    _find_singly_assigned_variable.replaced = True
    _find_singly_assigned_variable.original = original
    return _find_singly_assigned_variable


def install() -> bool:
    """Replace ``Lower._find_singly_assigned_variable`` (once) where it is the method this
    module was written against; True where the replacement is in place."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return False
    from numba.cuda import lowering

    method = lowering.Lower._find_singly_assigned_variable
    if getattr(method, "replaced", False):
        return True
    try:
        src = inspect.getsource(method)
    except (OSError, TypeError):
        return False
    if hashlib.sha256(src.encode()).hexdigest()[:16] != REPLACED:
        return False
    g = lowering.__dict__
    lowering.Lower._find_singly_assigned_variable = _singly_assigned(method, g["ir"], g["compute_use_defs"],
                                                                     g["must_use_alloca"])
    return True
