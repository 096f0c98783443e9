-- nn/attention.lua: CausalSelfAttention, qkv projection, causal softmax attention over
-- lw_attention_forward / _backward (grouped KV heads, a sliding window), output projection (the
-- module contract is in nn/module.lua). Under tensor parallelism (tp: lw.tp.groups's table, size
-- t) the heads are split over the TP group: qkv is column-parallel with blocks Q, K and V (each
-- rank holds its query heads' Q and the K and V of the KV heads they read: n_head / t and
-- n_kv_head / t of them, so t must divide n_kv_head), attention runs on the rank's heads, and
-- proj is row-parallel (its all-reduce gives every rank the whole output). When its owner asks
-- (head_max), the forward also gives each of the rank's heads' largest logit, which QK-clip reads
-- (lwopt/qk_clip.lua). With value embeddings (nanochat's, ResFormer's value residual), a table
-- of the tokens' values is mixed into V through a per-head gate (lw_value_gate_forward).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")
local ColumnParallelLinear = require("lwopt.nn.column_parallel")
local RowParallelLinear = require("lwopt.nn.row_parallel")
local Rotary = require("lwopt.nn.rotary")
local QKNorm = require("lwopt.nn.qk_norm")
local errors = require("lwopt.errors")

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
   if self.rotary then self.rotary.qkv_dtype = dtype end
   if self.qk_norm then self.qk_norm.qkv_dtype = dtype end
end

local function is_count(v) return type(v) == "number" and v >= 1 and v == math.floor(v) end

-- CausalSelfAttention(prefix, c, n_head, bias, tp, opts): opts (optional) = { n_kv_head (default
-- n_head: one KV head per head; fewer: grouped-query attention, query head h reading KV head
-- h / (n_head / n_kv_head)), window (default 0: every earlier key; w > 0: the w keys before a
-- query and its own, flash attention's window_size (w, 0)), rotary (nil: no positions here, as
-- GPT-2's learned table gives them; true or { base, pairing, sign }: nn.Rotary on the Q and K
-- heads of qkv's output), qk_norm (nil; true or { eps }: nn.QKNorm after the rotation, nanochat's
-- order), value_embed (nil; { vocab, channels = 12, scale = 3 }: parameters ve.weight {vocab,
-- kv}, looked up by the tokens the owner sets in self.tokens before each forward, and
-- ve_gate.weight {n_kv_head, channels}; V += scale sigmoid(ve_gate x[:, :channels]) ve per KV
-- head; under tp the table's columns and the gate's rows of this rank's KV heads: {vocab, kv / t}
-- and {n_kv_head / t, channels}) }. With hd = c / n_head and kv =
-- n_kv_head * hd: qkv {c + 2 kv, c} (rows: the query heads, then the KV heads' K, then their V)
-- and proj {c, c} Linears, or with tp (size above 1) their column- and row-parallel shards: qkv
-- {(c + 2 kv) / t, c}, proj {c, c / t}. The qkv weight's spec says how its rows split into Q, K
-- and V (qkv = { groups = 1, rows = { c / t, kv / t, kv / t } }: the rows this rank holds; t = 1
-- without tp), for the optimizer's QKV split and QK-clip.
function Attention.new(prefix, c, n_head, bias, tp, opts)
   local self = setmetatable({}, Attention):init(prefix)
   opts = opts or {}
   local who = "nn.CausalSelfAttention " .. prefix
   local n_kv, window = opts.n_kv_head or n_head, opts.window or 0
   if not is_count(n_kv) or n_head % n_kv ~= 0 then
      errors.fail(who, "n_kv_head (%s) must divide n_head (%d)", tostring(n_kv), n_head)
   end
   if type(window) ~= "number" or window < 0 or window ~= math.floor(window) then
      errors.fail(who, "window (%s) must be 0 (every earlier key) or a positive integer",
         tostring(window))
   end
   local t = tp and tp.size or 1
   if n_kv % t ~= 0 then
      errors.fail(who, "tp %d does not divide the %d KV heads (each TP rank holds n_kv_head / "
         .. "tp of them, with the query heads that read them)", t, n_kv)
   end
   local kv = n_kv * (c / n_head)
   -- this rank's channels, heads and KV heads (all of them without tp)
   self.c, self.n_head, self.n_kv_head, self.window = c / t, n_head / t, n_kv / t, window
   self.qkv_width = (c + 2 * kv) / t
   local qkv = { qkv = { groups = 1, rows = { c / t, kv / t, kv / t } } }
   -- positions and norms on this rank's heads, in place on qkv's output (no parameters)
   local hd = c / n_head
   if opts.rotary then
      local r = type(opts.rotary) == "table" and opts.rotary or {}
      self.rotary = self:add(Rotary.new({ prefix = prefix .. "rotary.", head_dim = hd,
         n_head = self.n_head, n_kv_head = self.n_kv_head, base = r.base, pairing = r.pairing,
         sign = r.sign }))
   end
   if opts.qk_norm then
      local q = type(opts.qk_norm) == "table" and opts.qk_norm or {}
      self.qk_norm = self:add(QKNorm.new({ prefix = prefix .. "qk_norm.", head_dim = hd,
         n_head = self.n_head, n_kv_head = self.n_kv_head, eps = q.eps }))
   end
   if opts.value_embed then
      local ve = opts.value_embed
      self.ve_channels, self.ve_scale = ve.channels or 12, ve.scale or 3
      if self.ve_channels > c then
         errors.fail(who, "the value gate's channels (%d) exceed n_embd (%d)", self.ve_channels, c)
      end
      -- this rank's KV heads' values (all of them without tp); the gate reads the whole input
      self.value_embed, self.kv, self.ve_vocab, self.x_width = true, kv / t, ve.vocab, c
   end
   if tp then
      -- equal blocks (today's { 3 }) unless the KV heads are fewer
      local blocks = kv == c and 3 or { c, kv, kv }
      self.qkv = self:add(ColumnParallelLinear.new(prefix .. "qkv.", c, c + 2 * kv, bias, tp,
         blocks, qkv))
      -- this rank's KV heads: the table's columns and the gate's rows
      if self.value_embed then
         self:declare("ve.weight", { self.ve_vocab, kv / t }, "embedding",
            { tp = { dim = 1, blocks = 1 }, full_shape = { self.ve_vocab, kv } })
         self:declare("ve_gate.weight", { n_kv / t, self.ve_channels }, "matrix",
            { tp = { dim = 0, blocks = 1 }, full_shape = { n_kv, self.ve_channels } })
      end
      self.proj = self:add(RowParallelLinear.new(prefix .. "proj.", c, c, bias, tp))
   else
      self.qkv = self:add(Linear.new(prefix .. "qkv.", c, c + 2 * kv, bias, { weight = qkv }))
      -- between qkv and proj: the order the passes read them in
      if self.value_embed then
         self:declare("ve.weight", { self.ve_vocab, kv }, "embedding")
         self:declare("ve_gate.weight", { n_kv, self.ve_channels }, "matrix")
      end
      self.proj = self:add(Linear.new(prefix .. "proj.", c, c, bias))
   end
   return self
end

-- the value embeddings' table is read with its dtype (lw_embedding_forward takes it)
Attention.stored_reads = { ["ve.weight"] = true }

-- The tokens' value embeddings (kept for the backward), mixed into qkv's V heads by the gate.
local function value_forward(self, x, b, t)
   local n = b * t
   self.ve = self:buffer("ve", n * self.kv)
   check(lib.lw_embedding_forward(self.stream, self.ve, self.tokens, self.w["ve.weight"], nil,
      self.dtype["ve.weight"], b, t, self.kv))
   check(lib.lw_value_gate_forward(self.stream, self.qkv_out, self.qkv.y_dtype, self.ve, x,
      self.qkv.x_dtype, self.w["ve_gate.weight"], n, self.qkv_width, self.c + self.kv,
      self.x_width, self.n_kv_head, self.c / self.n_head, self.ve_channels, self.ve_scale))
end

local function value_backward(self, x, dqkv, dx, b, t)
   local n = b * t
   local dve, dz = self:transient("dve", n * self.kv), self:transient("dz", n * self.n_kv_head)
   zero(dve, n * self.kv, self.stream)
   check(lib.lw_value_gate_backward(self.stream, dve, dx, self.g["ve_gate.weight"], dz, dqkv,
      self.qkv.y_dtype, self.ve, x, self.qkv.x_dtype, self.w["ve_gate.weight"], n,
      self.qkv_width, self.c + self.kv, self.x_width, self.n_kv_head, self.c / self.n_head,
      self.ve_channels, self.ve_scale))
   check(lib.lw_embedding_backward(self.stream, self.g["ve.weight"], nil, dve, self.tokens, b, t,
      self.kv))
end

-- x: [b*t, c] of qkv.x_dtype -> float* [b*t, c]
function Attention:forward(x, b, t)
   local n = b * t
   self.qkv_out = self.qkv:forward(x, n)
   if self.value_embed then self:with_params("forward", value_forward, x, b, t) end
   if self.rotary then self.rotary:forward(self.qkv_out, b, t) end
   if self.qk_norm then self.qk_norm:forward(self.qkv_out, b, t) end
   -- each row's log-sum-exp: all the backward keeps of the softmax (no t x t per head)
   self.lse = self:buffer("lse", b * self.n_head * t)
   self.y = self:buffer("y", base.floats_for(n * self.c, self.out_dtype))
   check(lib.lw_attention_forward(self.stream, self.y, self.out_dtype, self.lse, self.head_max,
      self:scratch(b, t), self.qkv_out, self.qkv.y_dtype, b, t, self.c, self.n_head,
      self.n_kv_head, self.window))
   return self.proj:forward(self.y, n)
end

-- What QK-clip scales here (lw_optimizer_qk_clip): the fused QKV weight's and bias's names (bias
-- nil without one), the head dim and this rank's heads, which head_max's order follows, and its
-- KV heads (a K shared by several heads is left alone and their queries take the whole scale;
-- the weight's qkv rows say the same to the optimizer).
function Attention:qk_clip_target()
   return { weight = self.prefix .. "qkv.weight",
            bias = self.qkv.has_bias and self.prefix .. "qkv.bias" or nil,
            head_dim = self.c / self.n_head, n_heads = self.n_head, n_kv_heads = self.n_kv_head }
end

-- The attention kernels' workspace on this device, shared with every other module there.
function Attention:scratch(b, t)
   return self:workspace(tonumber(lib.lw_attention_scratch_floats(self.stream, b, t,
      self.c, self.n_head, self.n_kv_head, self.window)), "attention scratch")
end

function Attention:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   -- qkv's output gradient in qkv's output dtype: written so here, read so by qkv's backward
   local qkv_dtype = self.qkv.y_dtype
   local dqkv_floats = base.floats_for(n * self.qkv_width, qkv_dtype)
   local dy, dqkv = self:transient("dy", n * c), self:transient("dqkv", dqkv_floats)
   zero(dy, n * c, self.stream)
   self.proj:backward(self.y, dout, dy, n)
   zero(dqkv, dqkv_floats, self.stream)
   check(lib.lw_attention_backward(self.stream, dqkv, qkv_dtype, self:scratch(b, t), dy,
      self.qkv_out, qkv_dtype, self.y, self.out_dtype, self.lse, b, t, c, self.n_head,
      self.n_kv_head, self.window))
   -- back through the norm (from its output, qkv_out as the forward left it) and the rotation
   if self.qk_norm then self.qk_norm:backward(self.qkv_out, dqkv, nil, b, t) end
   if self.rotary then self.rotary:backward(self.qkv_out, dqkv, nil, b, t) end
   -- V's gradient reaches the gate and the table; qkv's own V rows take it whole. Under tensor
   -- parallelism the gate's input gradient is this rank's heads' share: it joins qkv's share in
   -- the one all-reduce of the input gradient.
   if not self.value_embed then return self.qkv:backward(x, dqkv, dx, n) end
   local share = dx
   if self.qkv.tp or dx == nil then -- a share of its own (or the gate's, dropped)
      share = self:transient("gate dx", n * self.x_width)
      zero(share, n * self.x_width, self.stream)
   end
   self:with_params("backward", value_backward, x, dqkv, share, b, t)
   if self.qkv.tp and dx ~= nil then return self.qkv:backward(x, dqkv, dx, n, share) end
   self.qkv:backward(x, dqkv, dx, n)
end

return Attention
