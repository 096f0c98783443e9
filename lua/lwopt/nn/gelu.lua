-- nn/gelu.lua: GELU (tanh approximation), element-wise over lw_gelu_forward / _backward; no
-- parameters (the module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local GELU = base.class(base.Module)
GELU.shape_args = { "n" }
-- the output's dtype (lw_dtype): bf16 where it only feeds a matrix product (MLP:set_activations),
-- and the input's: bf16 where fc writes bf16
GELU.y_dtype, GELU.x_dtype = lib.LW_DTYPE_F32, lib.LW_DTYPE_F32

-- GELU(width): rows of `width` elements.
function GELU.new(width) return setmetatable({}, GELU):init(""):with_width(width) end
function GELU:with_width(w) self.width = w return self end

-- x: float* [n, width] -> float* [n, width]. With self.transient_output the output is a buffer
-- every GELU shares (Module:transient), valid until the next GELU's forward: for a caller that
-- reads it at once and recomputes it for its backward (MLP's recompute_gelu).
function GELU:forward(x, n)
   local y = self:output("y", base.floats_for(n * self.width, self.y_dtype))
   check(lib.lw_gelu_forward(self.stream, y, self.y_dtype, x, self.x_dtype, n * self.width))
   return y
end

function GELU:backward(x, dy, dx, n)
   check(lib.lw_gelu_backward(self.stream, dx, self.x_dtype, dy, x, self.x_dtype, n * self.width))
end

return GELU
