-- nn/attention.lua: CausalSelfAttention, qkv projection, causal softmax attention over
-- lw_attention_forward / _backward, output projection (the module contract is in
-- nn/module.lua). Under tensor parallelism (tp: lw.tp.groups's table, size t) the heads are split
-- over the TP group: qkv is column-parallel with blocks 3 (each rank holds its heads' Q, K and V),
-- attention runs on the rank's n_head / t heads, and proj is row-parallel (its all-reduce gives
-- every rank the whole output). When its owner asks (head_max), the forward also gives each of
-- the rank's heads' largest logit, which QK-clip reads (lwopt/qk_clip.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")
local ColumnParallelLinear = require("lwopt.nn.column_parallel")
local RowParallelLinear = require("lwopt.nn.row_parallel")

local lib = C.lib
local zero = base.zero
local check = base.check

local Attention = base.class(base.Module)
Attention.shape_args = { "b", "t" }
-- the attention's output dtype (lw_dtype): bf16 where the model keeps it so, which proj then
-- reads as it is (Attention:set_activations)
Attention.out_dtype = lib.LW_DTYPE_F32
-- nil, or a device float* [n_head] into which the forward writes its heads' largest logits
-- (lw_attention_forward's head_max), set by the model that reads them (GPT:set_max_logits)
Attention.head_max = nil

-- qkv's output (the attention's input) and the attention's output (proj's input) in dtype
-- (lw_dtype), and the input x, which qkv reads, in x_dtype.
function Attention:set_activations(dtype, x_dtype)
   self.qkv.y_dtype, self.out_dtype = dtype, dtype
   self.proj.x_dtype, self.qkv.x_dtype = dtype, x_dtype
end

-- CausalSelfAttention(prefix, c, n_head, bias, tp): qkv {3c, c} and proj {c, c} Linears, or with
-- tp (size above 1) their column- and row-parallel shards: qkv {3c / t, c}, proj {c, c / t}. The
-- qkv weight's spec says how its rows split into Q, K and V (qkv = { groups = 1, rows = { c / t,
-- c / t, c / t } }: the rows this rank holds; t = 1 without tp), for the optimizer's QKV split.
function Attention.new(prefix, c, n_head, bias, tp)
   local self = setmetatable({}, Attention):init(prefix)
   local t = tp and tp.size or 1
   -- this rank's channels and heads (all of them without tp)
   self.c, self.n_head = c / t, n_head / t
   local qkv = { qkv = { groups = 1, rows = { c / t, c / t, c / t } } }
   if tp then
      self.qkv = self:add(ColumnParallelLinear.new(prefix .. "qkv.", c, 3 * c, bias, tp, 3, qkv))
      self.proj = self:add(RowParallelLinear.new(prefix .. "proj.", c, c, bias, tp))
   else
      self.qkv = self:add(Linear.new(prefix .. "qkv.", c, 3 * c, bias, { weight = qkv }))
      self.proj = self:add(Linear.new(prefix .. "proj.", c, c, bias))
   end
   return self
end

-- x: float* [b*t, c] -> float* [b*t, c]
function Attention:forward(x, b, t)
   local n = b * t
   self.qkv_out = self.qkv:forward(x, n)
   -- each row's log-sum-exp: all the backward keeps of the softmax (no t x t per head)
   self.lse = self:buffer("lse", b * self.n_head * t)
   self.y = self:buffer("y", base.floats_for(n * self.c, self.out_dtype))
   check(lib.lw_attention_forward(self.stream, self.y, self.out_dtype, self.lse, self.head_max,
      self:scratch(b, t), self.qkv_out, self.qkv.y_dtype, b, t, self.c, self.n_head))
   return self.proj:forward(self.y, n)
end

-- What QK-clip scales here (lw_optimizer_qk_clip): the fused QKV weight's and bias's names (bias
-- nil without one), the head dim and this rank's heads, which head_max's order follows.
function Attention:qk_clip_target()
   return { weight = self.prefix .. "qkv.weight",
            bias = self.qkv.has_bias and self.prefix .. "qkv.bias" or nil,
            head_dim = self.c / self.n_head, n_heads = self.n_head }
end

-- The attention kernels' workspace on this device, shared with every other module there.
function Attention:scratch(b, t)
   return self:workspace(tonumber(lib.lw_attention_scratch_floats(self.stream, b, t,
      self.c, self.n_head)), "attention scratch")
end

function Attention:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   -- qkv's output gradient in qkv's output dtype: written so here, read so by qkv's backward
   local qkv_dtype = self.qkv.y_dtype
   local dqkv_floats = base.floats_for(n * 3 * c, qkv_dtype)
   local dy, dqkv = self:transient("dy", n * c), self:transient("dqkv", dqkv_floats)
   zero(dy, n * c, self.stream)
   self.proj:backward(self.y, dout, dy, n)
   zero(dqkv, dqkv_floats, self.stream)
   check(lib.lw_attention_backward(self.stream, dqkv, qkv_dtype, self:scratch(b, t), dy,
      self.qkv_out, qkv_dtype, self.y, self.out_dtype, self.lse, b, t, c, self.n_head))
   self.qkv:backward(x, dqkv, dx, n)
end

return Attention
