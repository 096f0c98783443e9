-- nn/rmsnorm.lua: RMSNorm over lw_rmsnorm_forward / _backward (LLaMA's norm, with a gain; or
-- nanochat's, without: no parameter at all); the module contract is in nn/module.lua.
-- y = x / sqrt(mean(x^2) + eps) * g per row.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local errors = require("lwopt.errors")
local check = base.check

local lib = C.lib

local RMSNorm = base.class(base.Module)
RMSNorm.shape_args = { "n" }
-- the output's dtype (lw_dtype): bf16 where it only feeds matrix products
RMSNorm.y_dtype = lib.LW_DTYPE_F32

-- RMSNorm(prefix, c, opts): opts.gain (default true) declares weight {c} (the gain, role
-- "norm"); gain = false declares no parameter. opts.eps (default 1e-5) is added to the mean of
-- squares.
function RMSNorm.new(prefix, c, opts)
   opts = opts or {}
   for k in pairs(opts) do
      if k ~= "gain" and k ~= "eps" then
         errors.misuse("nn.RMSNorm " .. prefix, "unknown option '%s' (gain, eps)", tostring(k))
      end
   end
   local gain = opts.gain
   if gain == nil then gain = true end
   if type(gain) ~= "boolean" then
      errors.misuse("nn.RMSNorm " .. prefix, "gain must be true or false, got %s", tostring(gain))
   end
   local eps = opts.eps or 1e-5
   if type(eps) ~= "number" or not (eps >= 0) or eps == math.huge then
      errors.misuse("nn.RMSNorm " .. prefix, "eps must be a finite number >= 0, got %s",
         tostring(eps))
   end
   local self = setmetatable({}, RMSNorm):init(prefix)
   self.c, self.has_gain, self.eps = c, gain, eps
   if gain then self:declare("weight", { c }, "norm") end
   return self
end

local function forward(self, x, n)
   local y = self:buffer("y", base.floats_for(n * self.c, self.y_dtype))
   self.rstd = self:buffer("rstd", n)
   check(lib.lw_rmsnorm_forward(self.stream, y, self.y_dtype, self.rstd, x,
      self.has_gain and self.w.weight or nil, n, self.c, self.eps))
   return y
end

local function backward(self, x, dy, dx, n)
   local g = self.has_gain and self.w.weight or nil
   check(lib.lw_rmsnorm_backward(self.stream, dx, self.has_gain and self.g.weight or nil, dy, x,
      g, self.rstd, n, self.c))
end

-- x: float* [n, c] -> float* [n, c] (of y_dtype); the rows' 1/rms stays for backward.
function RMSNorm:forward(x, n) return self:with_params("forward", forward, x, n) end

-- accumulates into dx (float* [n, c]) and, with a gain, into its gradient
function RMSNorm:backward(x, dy, dx, n) self:with_params("backward", backward, x, dy, dx, n) end

-- The residual add before the norm, as LayerNorm:forward_add: a, b float* [n, c] -> sum = a + b
-- (a buffer of this module) and the norm of sum (two passes: no fused kernel yet).
function RMSNorm:forward_add(a, b, n)
   self.sum = self:buffer("sum", n * self.c)
   check(lib.lw_vec_add(self.stream, self.sum, a, b, n * self.c))
   return self.sum, self:forward(self.sum, n)
end

-- As LayerNorm:backward_add: dx += dres, then the norm's input gradient from dy.
function RMSNorm:backward_add(x, dy, dx, dres, n)
   check(lib.lw_vec_add(self.stream, dx, dx, dres, n * self.c))
   self:backward(x, dy, dx, n)
end

return RMSNorm
