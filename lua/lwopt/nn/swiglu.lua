-- nn/swiglu.lua: SwiGLU, y = silu(a) * b over fused input rows [a | b] (LLaMA's gate and up
-- projections as one linear layer of 2 width outputs, gate first), over lw_swiglu_forward /
-- _backward; no parameters (the module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local SwiGLU = base.class(base.Module)
SwiGLU.shape_args = { "n" }
-- the output's and the input's dtypes (lw_dtype), as ReLU2's and GELU's
SwiGLU.y_dtype, SwiGLU.x_dtype = lib.LW_DTYPE_F32, lib.LW_DTYPE_F32

-- SwiGLU(width): rows of 2 width elements in (the gate's width, then the up projection's), of
-- width out.
function SwiGLU.new(width)
   local self = setmetatable({}, SwiGLU):init("")
   self.width, self.in_width = width, 2 * width
   return self
end

-- x: float* [n, 2 width] -> float* [n, width]; with self.transient_output a buffer every SwiGLU
-- shares (Module:output), for a caller that recomputes it for its backward.
function SwiGLU:forward(x, n)
   local y = self:output("y", base.floats_for(n * self.width, self.y_dtype))
   check(lib.lw_swiglu_forward(self.stream, y, self.y_dtype, x, self.x_dtype, n, self.in_width))
   return y
end

-- accumulates the fused gradient into dx [n, 2 width], in the input's dtype
function SwiGLU:backward(x, dy, dx, n)
   check(lib.lw_swiglu_backward(self.stream, dx, self.x_dtype, dy, x, self.x_dtype, n,
      self.in_width))
end

return SwiGLU
