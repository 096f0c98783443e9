-- nn/block.lua: Block, the transformer layer: x + attn(ln_1(x)), then + mlp(ln_2(.)), or
-- + moe(ln_2(.)) for a mixture of experts (nn/moe.lua) (the module contract is in
-- nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local LayerNorm = require("lwopt.nn.layernorm")
local RMSNorm = require("lwopt.nn.rmsnorm")
local Attention = require("lwopt.nn.attention")
local MLP = require("lwopt.nn.mlp")
local MoE = require("lwopt.nn.moe")

local lib = C.lib
local zero = base.zero
local check = base.check

local Block = base.class(base.Module)
Block.shape_args = { "b", "t" }

-- Block(prefix, c, n_head, bias, moe, tp, mlp_hidden, attn): moe (optional) is nn.MoE's config
-- ({ n_expert, topk, expert_hidden, aux_coef, shared_expert, router_muon }): the feed-forward is
-- then self.moe (parameters <prefix>moe.*) instead of self.mlp, whose hidden size is mlp_hidden
-- (default 4c). self.ffn is whichever it is. tp (optional: lw.tp.groups's table, size above 1;
-- a dense block only) splits the attention's heads and the MLP's channels over the TP group; the
-- layer norms stay whole on every rank. attn (optional): the attention's options (n_kv_head,
-- window, rotary, qk_norm: nn.CausalSelfAttention). parts (optional): { norm = "layernorm"
-- (default) | "rmsnorm", norm_gain (RMSNorm's, default true), norm_eps, activation (the dense
-- MLP's: "gelu", the default, "relu2", "swiglu") }.
function Block.new(prefix, c, n_head, bias, moe, tp, mlp_hidden, attn, parts)
   local self = setmetatable({}, Block):init(prefix)
   parts = parts or {}
   self.c = c
   self.ln_1 = self:add(Block.norm(prefix .. "ln_1.", c, bias, parts))
   self.attn = self:add(Attention.new(prefix .. "attn.", c, n_head, bias, tp, attn))
   self.ln_2 = self:add(Block.norm(prefix .. "ln_2.", c, bias, parts))
   if moe then
      local cfg = { bias = bias }
      for k, v in pairs(moe) do cfg[k] = v end
      self.moe = self:add(MoE.new(prefix .. "moe.", c, cfg))
      self.ffn = self.moe
   else
      self.mlp = self:add(MLP.new(prefix .. "mlp.", c, bias, mlp_hidden, nil, tp,
         parts.activation))
      self.ffn = self.mlp
      self.mlp.proj.transient_output = true
   end
   -- the projections' outputs go straight into the residual stream here (forward consumes them
   -- at once) and no backward reads them: buffers shared by every layer (Module:output)
   self.attn.proj.transient_output = true
   return self
end

-- A norm of the kind parts.norm says: GPT-2's LayerNorm (with a bias when the model has
-- biases), or RMSNorm (with a gain unless parts.norm_gain is false).
function Block.norm(prefix, c, bias, parts)
   if (parts.norm or "layernorm") == "layernorm" then return LayerNorm.new(prefix, c, bias) end
   return RMSNorm.new(prefix, c, { gain = parts.norm_gain ~= false, eps = parts.norm_eps })
end

-- The activations that only feed matrix products, the attention or GELU in `dtype` (lw_dtype:
-- fp32, the default, or bf16): the layer norms' outputs, which the attention's QKV and the MLP's
-- fc read, QKV's output, which the attention reads, the attention's, which its proj reads, fc's,
-- which GELU reads, and GELU's, which the MLP's proj reads; the residual stream, the
-- projections' outputs and every gradient stay fp32. A mixture of experts keeps ln_2's output
-- fp32 (its router and gathers read fp32).
function Block:set_activations(dtype)
   self.ln_1.y_dtype = dtype
   self.attn:set_activations(dtype, dtype)
   if self.mlp then
      self.ln_2.y_dtype = dtype
      self.mlp:set_activations(dtype, dtype)
   end
end

-- x: float* [b*t, c] -> float* [b*t, c]. The residual add after the attention is fused with
-- ln_2 (one pass over the rows instead of two; the same results).
function Block:forward(x, b, t)
   local n, c = b * t, self.c
   self.a_in = self.ln_1:forward(x, n)
   local a = self.attn:forward(self.a_in, b, t)
   self.mid, self.m_in = self.ln_2:forward_add(x, a, n)
   local m = self.ffn:forward(self.m_in, n)
   local y = self:buffer("y", n * c)
   check(lib.lw_vec_add(self.stream, y, self.mid, m, n * c))
   return y
end

-- dout: gradient of the block output; accumulates into dx. Each residual path's gradient is
-- added by the layer norm's backward beside it (lw_add_layernorm_backward), not in a pass of its
-- own.
function Block:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   local dm, dmid = self:transient("dm", n * c), self:transient("dmid", n * c)
   local da = self:transient("da", n * c)
   zero(dm, n * c, self.stream)
   self.ffn:backward(self.m_in, dout, dm, n)
   zero(dmid, n * c, self.stream)
   self.ln_2:backward_add(self.mid, dm, dmid, dout, n) -- dmid = dout + ln_2's gradient
   zero(da, n * c, self.stream)
   self.attn:backward(self.a_in, dmid, da, b, t)
   self.ln_1:backward_add(x, da, dx, dmid, n) -- dx += dmid + ln_1's gradient
end

return Block
