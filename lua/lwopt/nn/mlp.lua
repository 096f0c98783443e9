-- nn/mlp.lua: MLP, fc (c -> hidden, 4c by default), an activation, proj (hidden -> c) (the module
-- contract is in nn/module.lua). The activation is GELU (GPT-2's, the default), ReLU^2
-- (nanochat's) or SwiGLU (LLaMA's: fc then produces 2 hidden channels a row, the gate's then the
-- up projection's, and SwiGLU gives hidden; hidden always counts proj's input channels). A
-- mixture of experts' experts are MLPs too (nn/moe.lua). Under tensor parallelism (tp:
-- lw.tp.groups's table, size t) fc is column-parallel and proj row-parallel: each TP rank holds
-- hidden / t of the channels (SwiGLU's fc in two blocks, so that a rank holds its channels' gate
-- and up rows).
local base = require("lwopt.nn.module")
local errors = require("lwopt.errors")
local Linear = require("lwopt.nn.linear")
local GELU = require("lwopt.nn.gelu")
local ReLU2 = require("lwopt.nn.relu2")
local SwiGLU = require("lwopt.nn.swiglu")
local ColumnParallelLinear = require("lwopt.nn.column_parallel")
local RowParallelLinear = require("lwopt.nn.row_parallel")

local zero = base.zero

local MLP = base.class(base.Module)
MLP.shape_args = { "n" }

-- the activations by name: the module, and fc's output channels per hidden channel
local ACTIVATIONS = {
   gelu = { module = GELU, fc_per_hidden = 1 },
   relu2 = { module = ReLU2, fc_per_hidden = 1 },
   swiglu = { module = SwiGLU, fc_per_hidden = 2 },
}

-- MLP(prefix, c, bias, hidden, extra, tp, activation): hidden defaults to 4c; extra (optional) is
-- passed to both Linears (nn/linear.lua: the weights' role and fields of every spec, such as
-- expert); tp (optional, size above 1) splits the hidden channels over the TP group (extra is not
-- taken then: experts are not tensor-parallel); activation "gelu" (default), "relu2" or
-- "swiglu". self.act is the activation's module (self.gelu too, for GELU).
function MLP.new(prefix, c, bias, hidden, extra, tp, activation)
   activation = activation or "gelu"
   local act = ACTIVATIONS[activation]
   if act == nil then
      errors.misuse("nn.MLP " .. prefix, "unknown activation '%s' (gelu, relu2, swiglu)",
         tostring(activation))
   end
   local self = setmetatable({}, MLP):init(prefix)
   hidden = hidden or 4 * c
   local t, per = tp and tp.size or 1, act.fc_per_hidden
   -- this rank's hidden channels, and fc's outputs for them
   self.c, self.hidden, self.activation = c, hidden / t, activation
   self.fc_width = per * self.hidden
   if tp then
      self.fc = self:add(ColumnParallelLinear.new(prefix .. "fc.", c, per * hidden, bias, tp,
         per))
   else
      self.fc = self:add(Linear.new(prefix .. "fc.", c, per * hidden, bias, extra))
   end
   -- a child, though it has no parameters, so that bind gives it the device and stream too
   self.act = self:add(act.module.new(self.hidden))
   if activation == "gelu" then self.gelu = self.act end
   if tp then
      self.proj = self:add(RowParallelLinear.new(prefix .. "proj.", hidden, c, bias, tp))
   else
      self.proj = self:add(Linear.new(prefix .. "proj.", hidden, c, bias, extra))
   end
   return self
end

-- Keeps the activation's output (hidden channels a row) for the backward, or, with recompute
-- set, computes it again there from fc's output (one element-wise pass) and keeps only that: the
-- same results, without one [n, hidden] activation per layer. Set before the first forward.
-- (Named for GPT-2's GELU; it recomputes whichever activation the MLP has.)
function MLP:set_recompute_gelu(on)
   self.recompute_gelu = on
   self.act.transient_output = on
end

-- fc's output, which only feeds the activation, and the activation's, which only feeds proj, in
-- `dtype` (lw_dtype: fp32, or bf16, which the activation and proj then read as it is); x itself
-- in x_dtype (what fc reads).
function MLP:set_activations(dtype, x_dtype)
   self.fc.y_dtype, self.act.x_dtype = dtype, dtype
   self.act.y_dtype, self.proj.x_dtype, self.fc.x_dtype = dtype, dtype, x_dtype
end

-- Whether the activation is GELU and its input and output and proj's input share fc's output
-- dtype, as set_activations sets them: proj's and GELU's backwards then run as one call
-- (lw_linear_gelu_backward), and fc and GELU too (lw_linear_gelu_forward: one GEMM pass on a GPU
-- under bf16 products) unless GELU is recomputed, whose recomputation must give what the forward
-- gave (a GPU's GELU epilogue takes GELU of the unrounded sum, the GELU kernel of the rounded
-- one).
function MLP:fused()
   local dtype = self.fc.y_dtype
   return self.gelu ~= nil and self.gelu.x_dtype == dtype and self.gelu.y_dtype == dtype
      and self.proj.x_dtype == dtype
end

-- x: float* [n, c] -> float* [n, c]. The activation's output goes where its forward puts it
-- (recompute reuses it).
function MLP:forward(x, n)
   local dtype = self.fc.y_dtype
   if self:fused() and not self.recompute_gelu then
      self.a = self.gelu:output("y", base.floats_for(n * self.hidden, dtype))
      self.h = self.fc:with_params("forward", Linear.run_forward_gelu, x, n, self.a)
   else
      self.h = self.fc:forward(x, n)
      self.a = self.act:forward(self.h, n)
   end
   return self.proj:forward(self.a, n)
end

function MLP:backward(x, dout, dx, n)
   if self.recompute_gelu then self.a = self.act:forward(self.h, n) end
   -- fc's output gradient in fc's output dtype: the activation writes it so, fc's backward reads
   -- it so
   local dh_floats = base.floats_for(n * self.fc_width, self.fc.y_dtype)
   local dh = self:transient("dh", dh_floats)
   if self:fused() then -- dh written, not accumulated: no zeroing
      self.proj:with_params("backward", Linear.run_backward_gelu, self.a, dout, dh, n, self.h)
   else
      local w = self.hidden
      local da = self:transient("da", n * w)
      zero(da, n * w, self.stream)
      self.proj:backward(self.a, dout, da, n)
      zero(dh, dh_floats, self.stream)
      self.act:backward(self.h, da, dh, n)
   end
   self.fc:backward(x, dh, dx, n)
end

return MLP
