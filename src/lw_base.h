/* lw_base.h: what every layer of the public API shares: status codes, the last error, the
 * library's version, a monotonic clock, and the element types (lw_dtype). The conventions of
 * every lw_*.h (status and out pointers, [out] / [borrowed] / [owned], the enums' name
 * functions, versioned option structs) are set out in docs/c_api.md.
 */
#ifndef LW_BASE_API_H
#define LW_BASE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- status ------------------------------------------------------------------------------ */

typedef enum lw_status {
    LW_OK = 0,
    LW_ERR_INVALID = -1,     /* bad argument or input; the message names it */
    LW_ERR_NOMEM = -2,       /* an allocation failed */
    LW_ERR_UNSUPPORTED = -3, /* not built in (e.g. CUDA) or not implemented for this case */
    LW_ERR_RANGE = -4,       /* an index or name out of range / not found */
    LW_ERR_STATE = -5,       /* object in the wrong state for this call */
    LW_ERR_IO = -6,          /* file or system error */
    LW_ERR_TIMEOUT = -7      /* a collective did not complete within its communicator's timeout */
} lw_status;

/* Message of the last failed call on this thread, "" if none: "object: what went wrong, with
 * the value". [borrowed] until the next failing call on the same thread. */
const char *lw_last_error(void);
/* Library version, "MAJOR.MINOR.PATCH". [borrowed] static string. */
const char *lw_version(void);
/* Seconds on a monotonic clock, for timing. */
double lw_now(void);

/* ---- element types ----------------------------------------------------------------------- */

typedef enum lw_dtype {
    LW_DTYPE_F32 = 0,
    LW_DTYPE_BF16 = 1,
    LW_DTYPE_F16 = 2,
    LW_DTYPE_F64 = 3, /* reductions only (norms), not parameters */
    LW_DTYPE_I64 = 4  /* reductions only (counts), not parameters */
} lw_dtype;

/* "f32", "bf16", "f16", "f64", "i64"; NULL out of range. [borrowed] static string. Every enum
 * named in words has such a pair, lw_<enum>_name and lw_<enum>_from_name (docs/c_api.md). */
const char *lw_dtype_name(lw_dtype dtype);
/* [out] *out: the value of an exact name. LW_ERR_INVALID for any other name or NULL, *out
 * unchanged, the message listing the names ("unknown dtype 'x' (one of f32, ...)"). */
lw_status lw_dtype_from_name(const char *name, lw_dtype *out);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_BASE_API_H */
