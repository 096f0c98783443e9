-- nn/relu2.lua: ReLU^2, y = max(x, 0)^2 (the squared ReLU nanochat's MLP uses), element-wise
-- over lw_relu2_forward / _backward; no parameters (the module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local ReLU2 = base.class(base.Module)
ReLU2.shape_args = { "n" }
-- the output's dtype (lw_dtype): bf16 where it only feeds a matrix product, and the input's:
-- bf16 where fc writes bf16 (MLP:set_activations)
ReLU2.y_dtype, ReLU2.x_dtype = lib.LW_DTYPE_F32, lib.LW_DTYPE_F32

-- ReLU2(width): rows of `width` elements in and out.
function ReLU2.new(width)
   local self = setmetatable({}, ReLU2):init("")
   self.width, self.in_width = width, width
   return self
end

-- x: float* [n, width] -> float* [n, width]; with self.transient_output a buffer every ReLU2
-- shares (Module:output), for a caller that recomputes it for its backward.
function ReLU2:forward(x, n)
   local y = self:output("y", base.floats_for(n * self.width, self.y_dtype))
   check(lib.lw_relu2_forward(self.stream, y, self.y_dtype, x, self.x_dtype, n * self.width))
   return y
end

-- dx in the input's dtype (fc's output gradient, read by fc's backward as it is)
function ReLU2:backward(x, dy, dx, n)
   check(lib.lw_relu2_backward(self.stream, dx, self.x_dtype, dy, x, self.x_dtype,
      n * self.width))
end

return ReLU2
