-- nn/column_parallel.lua: ColumnParallelLinear, tensor parallelism's column-parallel linear:
-- y_r = x W_r^T + b_r, W_r this TP rank's rows of the weight {out, in} (its output channels),
-- b_r its entries of the bias. Forward needs no communication (x is the same on every TP rank);
-- backward all-reduces the input gradient over the TP group (each rank's is the share of its
-- channels). The module contract is in nn/module.lua.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local tp_mod = require("lwopt.tp")
local Linear = require("lwopt.nn.linear")
local errors = require("lwopt.errors")

local lib = C.lib
local check, zero = base.check, base.zero

local ColumnParallelLinear = base.class(base.Module)
ColumnParallelLinear.shape_args = { "n" }
ColumnParallelLinear.stored_reads = Linear.stored_reads
ColumnParallelLinear.x_dtype, ColumnParallelLinear.y_dtype = Linear.x_dtype, Linear.y_dtype

-- ColumnParallelLinear(prefix, in, out, bias, tp, blocks, weight_extra): tp is lw.tp.groups's
-- table (size t, rank r; comm for the all-reduce); the full weight {out, in} is `blocks` (default
-- 1) equal blocks of rows, or blocks of the sizes listed (a fused QKV weight with fewer KV heads:
-- { q, k, v }), each split over the t ranks (the fused QKV weight: blocks 3, [Q; K; V]), and this
-- rank holds piece r of each: weight {out / t, in} and bias {out / t}, both with tp = { dim = 0,
-- blocks } (and sizes, the blocks' rows, when they are listed) and full_shape. weight_extra:
-- fields of the weight's spec alone (qkv).
function ColumnParallelLinear.new(prefix, n_in, n_out, bias, tp, blocks, weight_extra)
   local self = setmetatable({}, ColumnParallelLinear):init(prefix)
   local who = "nn.ColumnParallelLinear " .. prefix
   blocks = blocks or 1
   local t = tp.size
   local sizes = type(blocks) == "table" and blocks or nil
   if sizes then
      local sum = 0
      for _, rows in ipairs(sizes) do
         if rows % t ~= 0 then
            errors.fail(who, "tp %d does not split a block of %d of the %d output channels",
               t, rows, n_out)
         end
         sum = sum + rows
      end
      if sum ~= n_out then
         errors.fail(who, "blocks of %s rows do not make the %d output channels",
            table.concat(sizes, " + "), n_out)
      end
   elseif n_out % (t * blocks) ~= 0 then
      errors.fail(who, "tp %d does not split the %d output channels into %d block%s", t, n_out,
         blocks, blocks == 1 and "" or "s")
   end
   self.tp, self.n_in, self.n_out, self.has_bias = tp, n_in, n_out / t, bias
   local function sharding()
      return { dim = 0, blocks = sizes and #sizes or blocks, sizes = sizes }
   end
   local fields = { tp = sharding(), full_shape = { n_out, n_in } }
   for k, v in pairs(weight_extra or {}) do fields[k] = v end
   self:declare("weight", { n_out / t, n_in }, "matrix", fields)
   if bias then
      self:declare("bias", { n_out / t }, "bias", { tp = sharding(), full_shape = { n_out } })
   end
   return self
end

-- x: float* [n, in] (the same on every TP rank) -> float* [n, out / t]
function ColumnParallelLinear:forward(x, n) return self:with_params("forward", Linear.run_forward, x, n) end

-- Accumulates into dx (float* [n, in], may be nil) the whole input gradient (the TP group's sum)
-- and into this rank's parameter gradients. share (optional, with dx): float* [n, in], this
-- rank's share of the input gradient from another branch that reads the same x (the value
-- gate); this layer's share is added to it and the sum all-reduced once (share is overwritten).
function ColumnParallelLinear:backward(x, dy, dx, n, share)
   local dxp = share
   if dx ~= nil and dxp == nil then
      dxp = self:transient("dx share", n * self.n_in)
      zero(dxp, n * self.n_in, self.stream)
   end
   self:with_params("backward", Linear.run_backward, x, dy, dxp, n)
   if dx ~= nil then
      tp_mod.allreduce(self.tp, self.device, dxp, n * self.n_in, "the input gradient of "
         .. self.prefix .. "weight")
      check(lib.lw_vec_add(self.stream, dx, dx, dxp, n * self.n_in))
   end
end

return ColumnParallelLinear
