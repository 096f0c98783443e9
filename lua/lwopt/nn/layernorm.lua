-- nn/layernorm.lua: LayerNorm over lw_layernorm_forward / _backward, eps 1e-5 (the module
-- contract is in nn/module.lua), and the same fused with a residual add around it (forward_add,
-- backward_add over lw_add_layernorm_*), which the transformer block uses.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local LayerNorm = base.class(base.Module)
LayerNorm.shape_args = { "n" }
-- the output's dtype (lw_dtype): bf16 where it only feeds matrix products (Block:set_activations)
LayerNorm.y_dtype = lib.LW_DTYPE_F32

-- LayerNorm(prefix, c, bias): weight {c} (the gain), bias {c}.
function LayerNorm.new(prefix, c, bias)
   local self = setmetatable({}, LayerNorm):init(prefix)
   self.c, self.has_bias = c, bias
   self:declare("weight", { c }, "norm")
   if bias then self:declare("bias", { c }, "bias") end
   return self
end

local function forward(self, x, n)
   local y = self:buffer("y", base.floats_for(n * self.c, self.y_dtype))
   self.mean, self.rstd = self:buffer("mean", n), self:buffer("rstd", n)
   check(lib.lw_layernorm_forward(self.stream, y, self.y_dtype, self.mean, self.rstd, x,
      self.w.weight, self.has_bias and self.w.bias or nil, n, self.c, 1e-5))
   return y
end

local function backward(self, x, dy, dx, n)
   check(lib.lw_layernorm_backward(self.stream, dx, self.g.weight,
      self.has_bias and self.g.bias or nil, dy, x, self.w.weight, self.mean, self.rstd, n, self.c))
end

-- (with_params passes one result on: the sum stays in self.sum)
local function forward_add(self, a, b, n)
   local y = self:buffer("y", base.floats_for(n * self.c, self.y_dtype))
   self.sum = self:buffer("sum", n * self.c)
   self.mean, self.rstd = self:buffer("mean", n), self:buffer("rstd", n)
   check(lib.lw_add_layernorm_forward(self.stream, self.sum, y, self.y_dtype, self.mean, self.rstd,
      a, b, self.w.weight, self.has_bias and self.w.bias or nil, n, self.c, 1e-5))
   return y
end

local function backward_add(self, x, dy, dx, dres, n)
   check(lib.lw_add_layernorm_backward(self.stream, dx, self.g.weight,
      self.has_bias and self.g.bias or nil, dres, dy, x, self.w.weight, self.mean, self.rstd, n,
      self.c))
end

-- x: float* [n, c] -> float* [n, c]; the row statistics stay for backward.
function LayerNorm:forward(x, n) return self:with_params("forward", forward, x, n) end

function LayerNorm:backward(x, dy, dx, n) self:with_params("backward", backward, x, dy, dx, n) end

-- The residual add before the norm in the same pass: a, b float* [n, c] -> sum = a + b (the
-- residual stream, a buffer of this module) and the norm of sum, float* [n, c] each.
function LayerNorm:forward_add(a, b, n)
   local y = self:with_params("forward", forward_add, a, b, n)
   return self.sum, y
end

-- backward of the norm of x whose input also flows on in the residual stream: accumulates dres
-- (the stream's gradient) and then the norm's input gradient from dy into dx.
function LayerNorm:backward_add(x, dy, dx, dres, n)
   self:with_params("backward", backward_add, x, dy, dx, dres, n)
end

return LayerNorm
