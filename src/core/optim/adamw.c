/* adamw.c: AdamW's options (docs/algorithms.md section 7); the update itself runs on the device
 * (lw_adamw_update, device/cpu/adamw.c). */
#include "base/base.h"

lw_adamw_options lw_adamw_defaults(void) {
    lw_adamw_options o = {sizeof(lw_adamw_options), 0.9f, 0.95f, 1e-8f};
    return o;
}
