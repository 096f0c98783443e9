-- nn/mlp.lua: MLP, fc (c -> hidden, 4c by default), GELU, proj (hidden -> c) (the module
-- contract is in nn/module.lua). A mixture of experts' experts are MLPs too (nn/moe.lua). Under
-- tensor parallelism (tp: lw.tp.groups's table, size t) fc is column-parallel and proj
-- row-parallel: each TP rank holds hidden / t of the channels.
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")
local GELU = require("lwopt.nn.gelu")
local ColumnParallelLinear = require("lwopt.nn.column_parallel")
local RowParallelLinear = require("lwopt.nn.row_parallel")

local zero = base.zero

local MLP = base.class(base.Module)
MLP.shape_args = { "n" }

-- MLP(prefix, c, bias, hidden, extra, tp): hidden defaults to 4c; extra (optional) is passed to
-- both Linears (nn/linear.lua: the weights' role and fields of every spec, such as expert); tp
-- (optional, size above 1) splits the hidden channels over the TP group (extra is not taken
-- then: experts are not tensor-parallel).
function MLP.new(prefix, c, bias, hidden, extra, tp)
   local self = setmetatable({}, MLP):init(prefix)
   hidden = hidden or 4 * c
   -- this rank's hidden channels
   self.c, self.hidden = c, hidden / (tp and tp.size or 1)
   if tp then
      self.fc = self:add(ColumnParallelLinear.new(prefix .. "fc.", c, hidden, bias, tp))
   else
      self.fc = self:add(Linear.new(prefix .. "fc.", c, hidden, bias, extra))
   end
   -- a child, though it has no parameters, so that bind gives it the device and stream too
   self.gelu = self:add(GELU.new(self.hidden))
   if tp then
      self.proj = self:add(RowParallelLinear.new(prefix .. "proj.", hidden, c, bias, tp))
   else
      self.proj = self:add(Linear.new(prefix .. "proj.", hidden, c, bias, extra))
   end
   return self
end

-- Keeps GELU's output (hidden channels a row) for the backward, or, with recompute set,
-- computes it again there from fc's output (one element-wise pass) and keeps only that: the
-- same results, without one [n, hidden] activation per layer. Set before the first forward.
function MLP:set_recompute_gelu(on)
   self.recompute_gelu = on
   self.gelu.transient_output = on
end

-- fc's output, which only feeds GELU, and GELU's, which only feeds proj, in `dtype` (lw_dtype:
-- fp32, or bf16, which GELU and proj then read as it is); x itself in x_dtype (what fc reads).
function MLP:set_activations(dtype, x_dtype)
   self.fc.y_dtype, self.gelu.x_dtype = dtype, dtype
   self.gelu.y_dtype, self.proj.x_dtype, self.fc.x_dtype = dtype, dtype, x_dtype
end

-- Whether GELU's input and output and proj's input share fc's output dtype, as set_activations
-- sets them: proj's and GELU's backwards then run as one call (lw_linear_gelu_backward), and
-- fc and GELU too (lw_linear_gelu_forward: one GEMM pass on a GPU under bf16 products) unless
-- GELU is recomputed, whose recomputation must give what the forward gave (a GPU's GELU epilogue
-- takes GELU of the unrounded sum, the GELU kernel of the rounded one).
function MLP:fused()
   local dtype = self.fc.y_dtype
   return self.gelu.x_dtype == dtype and self.gelu.y_dtype == dtype and self.proj.x_dtype == dtype
end

-- x: float* [n, c] -> float* [n, c]. GELU's output goes where GELU:forward puts it (recompute
-- reuses it).
function MLP:forward(x, n)
   local dtype = self.fc.y_dtype
   if self:fused() and not self.recompute_gelu then
      self.a = self.gelu:output("y", base.floats_for(n * self.hidden, dtype))
      self.h = self.fc:with_params("forward", Linear.run_forward_gelu, x, n, self.a)
   else
      self.h = self.fc:forward(x, n)
      self.a = self.gelu:forward(self.h, n)
   end
   return self.proj:forward(self.a, n)
end

function MLP:backward(x, dout, dx, n)
   local w = self.hidden
   if self.recompute_gelu then self.a = self.gelu:forward(self.h, n) end
   -- fc's output gradient in fc's output dtype: GELU writes it so, fc's backward reads it so
   local dh_floats = base.floats_for(n * w, self.fc.y_dtype)
   local dh = self:transient("dh", dh_floats)
   if self:fused() then -- dh written, not accumulated: no zeroing
      self.proj:with_params("backward", Linear.run_backward_gelu, self.a, dout, dh, n, self.h)
   else
      local da = self:transient("da", n * w)
      zero(da, n * w, self.stream)
      self.proj:backward(self.a, dout, da, n)
      zero(dh, dh_floats, self.stream)
      self.gelu:backward(self.h, da, dh, n)
   end
   self.fc:backward(x, dh, dx, n)
end

return MLP
