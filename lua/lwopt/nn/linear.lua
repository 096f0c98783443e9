-- nn/linear.lua: Linear, y = x W^T + b over lw_linear_forward / lw_linear_backward (the module
-- contract is in nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local check = base.check

local lib = C.lib

local Linear = base.class(base.Module)
Linear.shape_args = { "n" }
Linear.stored_reads = { weight = true } -- the kernels take the weight's dtype
-- the input's dtype (lw_dtype): fp32, or bf16 where the module feeding it writes bf16 (a parent
-- sets it on the instance: Block:set_activations)
Linear.x_dtype = lib.LW_DTYPE_F32
-- the output's dtype: fp32, or bf16 where it only feeds the attention or GELU (set likewise);
-- the output's gradient comes in it too (their backwards write it so)
Linear.y_dtype = lib.LW_DTYPE_F32

-- Linear(prefix, in, out, bias, extra): weight {out, in}, bias {out}. extra (optional): the
-- weight's role (extra.role, default "matrix"), fields of the weight's spec alone (extra.weight:
-- a table, such as the fused QKV weight's qkv) and fields set in both specs (expert = true for
-- an expert's layers, use_muon = false for a router kept off Muon).
function Linear.new(prefix, n_in, n_out, bias, extra)
   local self = setmetatable({}, Linear):init(prefix)
   self.n_in, self.n_out, self.has_bias = n_in, n_out, bias
   local role, fields, weight_only = "matrix", {}, {}
   for k, v in pairs(extra or {}) do
      if k == "role" then role = v elseif k == "weight" then weight_only = v else fields[k] = v end
   end
   local weight_fields = {}
   for k, v in pairs(fields) do weight_fields[k] = v end
   for k, v in pairs(weight_only) do weight_fields[k] = v end
   self:declare("weight", { n_out, n_in }, role, weight_fields)
   if bias then self:declare("bias", { n_out }, "bias", fields) end
   return self
end

local function forward(self, x, n)
   local y = self:output("y", base.floats_for(n * self.n_out, self.y_dtype))
   check(lib.lw_linear_forward(self.stream, y, self.y_dtype, x, self.x_dtype, self.w.weight,
      self.dtype.weight, self.has_bias and self.w.bias or nil, n, self.n_in, self.n_out))
   return y
end

-- The forward and GELU after it (lw_linear_gelu_forward): y, this layer's output, is GELU's
-- input; `a` receives GELU's output (the caller's buffer, y_dtype too).
local function forward_gelu(self, x, n, a)
   local y = self:output("y", base.floats_for(n * self.n_out, self.y_dtype))
   check(lib.lw_linear_gelu_forward(self.stream, a, y, self.y_dtype, x, self.x_dtype,
      self.w.weight, self.dtype.weight, self.has_bias and self.w.bias or nil, n, self.n_in,
      self.n_out))
   return y
end

local function backward(self, x, dy, dx, n)
   check(lib.lw_linear_backward(self.stream, dx, self.g.weight,
      self.has_bias and self.g.bias or nil, dy, self.y_dtype, x, self.x_dtype, self.w.weight,
      self.dtype.weight, n, self.n_in, self.n_out))
end

-- The backward with GELU's before it (lw_linear_gelu_backward): x = GELU(pre) is this layer's
-- input; dpre (GELU's input gradient, x_dtype as pre) is written, not accumulated.
local function backward_gelu(self, x, dy, dpre, n, pre)
   check(lib.lw_linear_gelu_backward(self.stream, dpre, self.x_dtype, self.g.weight,
      self.has_bias and self.g.bias or nil, dy, self.y_dtype, x, self.x_dtype, self.w.weight,
      self.dtype.weight, pre, n, self.n_in, self.n_out))
end

-- x: [n, in] (x_dtype) -> [n, out] (y_dtype)
function Linear:forward(x, n) return self:with_params("forward", forward, x, n) end

-- Accumulates into dx (float* [n, in], may be nil) and the parameter gradients; dy [n, out] in
-- y_dtype.
function Linear:backward(x, dy, dx, n) self:with_params("backward", backward, x, dy, dx, n) end

-- The kernels over self's fields (w, g, n_in, n_out, has_bias, stream), for modules that run a
-- linear layer on their own parameters (the tensor-parallel ones): run_forward(self, x, n) ->
-- y; run_backward(self, x, dy, dx, n); for an MLP, with self:with_params: run_forward_gelu(self,
-- x, n, a) -> y, GELU's output in a; run_backward_gelu(self, x, dy, dpre, n, pre).
Linear.run_forward, Linear.run_backward = forward, backward
Linear.run_forward_gelu, Linear.run_backward_gelu = forward_gelu, backward_gelu

return Linear
