-- nn/activation.lua: Activation, the base of the parameter-free activations (nn.GELU, nn.ReLU2,
-- nn.SwiGLU): rows of in_width elements in and width out, through a forward kernel and an
-- accumulating backward kernel of lw.h, each taking the output's (the input gradient's) dtype
-- and the input's. A class names its kernels, and the sizes they take when these are not
-- n * width elements (the module contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local Activation = base.class(base.Module)
Activation.shape_args = { "n" }
-- the output's dtype (lw_dtype): bf16 where it only feeds a matrix product, and the input's:
-- bf16 where fc writes bf16 (MLP:set_activations)
Activation.y_dtype, Activation.x_dtype = lib.LW_DTYPE_F32, lib.LW_DTYPE_F32

-- A class over forward(stream, y, y_dtype, x, x_dtype, sizes...) and backward(stream, dx,
-- dx_dtype, dy, x, x_dtype, sizes...) (lw.h's functions), in_per_out input elements to an output
-- one (default 1). Class.new(width): rows of in_per_out * width elements in, of width out.
function Activation.derive(forward, backward, in_per_out)
   local class = base.class(Activation)
   class.forward_kernel, class.backward_kernel = forward, backward
   class.in_per_out = in_per_out or 1
   function class.new(width) return setmetatable({}, class):init(""):with_width(width) end
   return class
end

function Activation:with_width(w)
   self.width, self.in_width = w, self.in_per_out * w
   return self
end

-- What the kernels take after the dtypes for n rows: the element count.
function Activation:sizes(n) return n * self.width end

-- x: float* [n, in_width] -> float* [n, width]. With self.transient_output the output is a
-- buffer every module of the class shares (Module:transient), valid until the next one's
-- forward: for a caller that reads it at once and recomputes it for its backward (MLP's
-- recompute_gelu).
function Activation:forward(x, n)
   local y = self:output("y", base.floats_for(n * self.width, self.y_dtype))
   check(self.forward_kernel(self.stream, y, self.y_dtype, x, self.x_dtype, self:sizes(n)))
   return y
end

-- accumulates into dx [n, in_width], in the input's dtype (fc's output gradient, read by fc's
-- backward as it is)
function Activation:backward(x, dy, dx, n)
   check(self.backward_kernel(self.stream, dx, self.x_dtype, dy, x, self.x_dtype, self:sizes(n)))
end

return Activation
