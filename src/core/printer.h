/* printer.h — the printer's helpers shared with the parser, the verifier and the tests, and the IR
 * shapes the printer relies on (th_trace_print itself is public: include/thunder/trace.h).
 *
 * IR conventions. The printer writes what Lightning Thunder prints only when bound symbols have the
 * shapes below; the parser produces exactly these shapes, and transforms, executors and passes that
 * build bsyms by hand must produce them too, or their traces print (and so round-trip) differently:
 *
 *   prims.python_del     nargs == 1, args[0] a TUPLE of VALUE args, one per deleted value, in order;
 *                        out NONE, no subsymbols. Prints "del a, b". (The printer also flattens one
 *                        tuple/list level of several args, and a bare VALUE arg, but those are not the
 *                        canonical form and transforms should not make them.) Never a constant.
 *   prims.python_return  nargs == 1, args[0] the returned object exactly as Python would see it:
 *                        NONE ("return None"), a VALUE ("return t0"), a TUPLE ("return (t0, t1)"; a
 *                        1-tuple prints "(t0,)"), a DICT, ... out NONE, no subsymbols; the last top-level
 *                        bsym. `return a, b` in the text is parsed as ONE TUPLE argument.
 *                        th_trace_set_return builds this form. (nargs == 0 prints "return None" and
 *                        nargs > 1 joins the args with ", ", but neither is produced by the core.)
 *   prims.comment        nargs == 1, args[0] a STR without newlines; prints "# text".
 *   prims.unpack_sequence nargs == 2: args[0] a VALUE that is a collection, args[1] INT its length; out
 *                        a TUPLE of the collection's items (VALUEs; NONE for an unused one, printed `_`).
 *                        Prints "C0, C1, = saved_for_backward", then one "# C0: \"Collection\"" line
 *                        per value at the same indentation (a zero-length one: "# C1 (empty sequence)").
 *                        th_unpack_sequence_new builds this form.
 *   fusion regions       a dynamic symbol (th_symbol_new_dynamic, printed by its bare name) whose
 *   (and executor ops)   positional args are the region's inputs (VALUEs) and whose `out` is a LIST of
 *                        VALUEs, even for one output: "[t6] = nvFusion1(result, t_2)" with no type
 *                        comment. A single VALUE out would print "t6 = nvFusion1(...)  # t6: ..." (an
 *                        executor-op form, not a fusion). The subsymbols are the region's body: they
 *                        may use only the region's arguments and values defined earlier in the body
 *                        (th_trace_verify checks this), and they define the region's outputs.
 *   outputs in general   VALUE (type comment printed), TUPLE/LIST of outputs (container syntax, no type
 *                        comment), NONE or an empty TUPLE/LIST (no "lhs =" at all); anything else in an
 *                        output prints as `_`.
 *   torch-level ops      args one per schema parameter (defaults filled in, as th_schema_bind makes them),
 *                        keyword-only parameters printed name=value; nkwargs == 0. Subsymbols, when
 *                        present, are the decomposition: they use only the op's value arguments and the
 *                        outputs of earlier subsymbols, and together define every output of the op.
 */
#ifndef TH_PRINTER_H
#define TH_PRINTER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/ir.h"

/* Appends one bound symbol as one line, as th_trace_print writes it but without indentation, the
 * "# " prefix of a subsymbol, or a newline: "t0 = prims.neg(a)", "del t0", "return (t0,)",
 * "[t1] = fusion0(x)". With type_comment, a single-proxy output gets its `  # t0: "cpu f32[2]"`
 * comment. Used in verifier and parser messages. Never fails (an OOM is the strbuf's to report). */
void th_print_bsym_line(th_strbuf *sb, const th_bsym *b, bool type_comment);

/* A proxy's type string as the printer writes it in type comments: "cuda:0 f32[2, 2]", "cpu b8[]",
 * "int 4", "bool True", "int ?", and float proxies with Python's float repr ("float 0.1", not
 * th_value_type_string's %.17g). Truncated to fit buf (n bytes, NUL-terminated when n > 0). */
void th_print_value_type(const th_value *v, char *buf, size_t n);

/* Python's repr() of a float: the shortest digits that round-trip, scientific notation when the
 * decimal exponent is < -4 or >= 16 ("1e-05", "1e+16"), else fixed with at least one fractional digit
 * ("448.0", "0.0001"); non-finite values print "nan", "inf", "-inf" (the caller spells constants
 * float('inf') where Python code needs it). Truncated to fit buf. */
void th_print_py_float(double f, char *buf, size_t n);

#endif
