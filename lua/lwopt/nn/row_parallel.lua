-- nn/row_parallel.lua: RowParallelLinear, tensor parallelism's row-parallel linear:
-- y = sum over the TP group of x_r W_r^T, plus b; W_r this TP rank's columns of the weight {out,
-- in} (its input channels), x_r its part of the input (a column-parallel layer's output). Forward
-- ends with an all-reduce over the TP group (TP rank 0 adds the bias before it, so it counts
-- once); backward needs no communication: the output gradient is the same on every rank, so the
-- bias (replicated) gets its whole gradient on each. The module contract is in nn/module.lua.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local tp_mod = require("lwopt.tp")
local Linear = require("lwopt.nn.linear")
local errors = require("lwopt.errors")

local lib = C.lib
local check = base.check

local RowParallelLinear = base.class(base.Module)
RowParallelLinear.shape_args = { "n" }
RowParallelLinear.stored_reads = Linear.stored_reads
RowParallelLinear.x_dtype = Linear.x_dtype
-- the output is all-reduced over the TP group in fp32, and so is its gradient
RowParallelLinear.y_dtype = lib.LW_DTYPE_F32

-- RowParallelLinear(prefix, in, out, bias, tp): tp is lw.tp.groups's table (size t, rank r);
-- weight {out, in / t} with tp = { dim = 1, blocks = 1 } and full_shape {out, in}; bias {out},
-- replicated (no tp field).
function RowParallelLinear.new(prefix, n_in, n_out, bias, tp)
   local self = setmetatable({}, RowParallelLinear):init(prefix)
   local t = tp.size
   if n_in % t ~= 0 then
      errors.fail("nn.RowParallelLinear " .. prefix, "tp %d does not divide the %d input "
         .. "channels", t, n_in)
   end
   self.tp, self.n_in, self.n_out, self.has_bias = tp, n_in / t, n_out, bias
   self:declare("weight", { n_out, n_in / t }, "matrix", { tp = { dim = 1, blocks = 1 },
      full_shape = { n_out, n_in } })
   if bias then self:declare("bias", { n_out }, "bias") end
   return self
end

local function forward(self, x, n)
   local y = self:output("y", n * self.n_out)
   local b = self.has_bias and self.tp.rank == 0 and self.w.bias or nil
   check(lib.lw_linear_forward(self.stream, y, self.y_dtype, x, self.x_dtype, self.w.weight,
      self.dtype.weight, b, n, self.n_in, self.n_out))
   return y
end

-- x: float* [n, in / t] (this rank's part) -> float* [n, out], the same on every TP rank
function RowParallelLinear:forward(x, n)
   local y = self:with_params("forward", forward, x, n)
   tp_mod.allreduce(self.tp, self.device, y, n * self.n_out, "the output of "
      .. self.prefix .. "weight")
   return y
end

-- Accumulates into dx (float* [n, in / t], may be nil) and the parameter gradients.
function RowParallelLinear:backward(x, dy, dx, n)
   self:with_params("backward", Linear.run_backward, x, dy, dx, n)
end

return RowParallelLinear
