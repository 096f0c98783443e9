-- nn/block.lua: Block, the transformer layer: x + attn(ln_1(x)), then + mlp(ln_2(.)), or
-- + moe(ln_2(.)) for a mixture of experts (nn/moe.lua) (the module contract is in
-- nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local LayerNorm = require("lwopt.nn.layernorm")
local Attention = require("lwopt.nn.attention")
local MLP = require("lwopt.nn.mlp")
local MoE = require("lwopt.nn.moe")

local lib = C.lib
local zero = base.zero
local check = base.check

local Block = base.class(base.Module)
Block.shape_args = { "b", "t" }

-- Block(prefix, c, n_head, bias, moe, tp, mlp_hidden): moe (optional) is nn.MoE's config
-- ({ n_expert, topk, expert_hidden, aux_coef, shared_expert, router_muon }): the feed-forward is
-- then self.moe (parameters <prefix>moe.*) instead of self.mlp, whose hidden size is mlp_hidden
-- (default 4c). self.ffn is whichever it is. tp (optional: lw.tp.groups's table, size above 1;
-- a dense block only) splits the attention's heads and the MLP's channels over the TP group; the
-- layer norms stay whole on every rank.
function Block.new(prefix, c, n_head, bias, moe, tp, mlp_hidden)
   local self = setmetatable({}, Block):init(prefix)
   self.c = c
   self.ln_1 = self:add(LayerNorm.new(prefix .. "ln_1.", c, bias))
   self.attn = self:add(Attention.new(prefix .. "attn.", c, n_head, bias, tp))
   self.ln_2 = self:add(LayerNorm.new(prefix .. "ln_2.", c, bias))
   if moe then
      local cfg = { bias = bias }
      for k, v in pairs(moe) do cfg[k] = v end
      self.moe = self:add(MoE.new(prefix .. "moe.", c, cfg))
      self.ffn = self.moe
   else
      self.mlp = self:add(MLP.new(prefix .. "mlp.", c, bias, mlp_hidden, nil, tp))
      self.ffn = self.mlp
   end
   return self
end

-- x: float* [b*t, c] -> float* [b*t, c]
function Block:forward(x, b, t)
   local n, c = b * t, self.c
   self.a_in = self.ln_1:forward(x, n)
   local a = self.attn:forward(self.a_in, b, t)
   self.mid = self:buffer("mid", n * c)
   check(lib.lw_vec_add(self.stream, self.mid, x, a, n * c))
   self.m_in = self.ln_2:forward(self.mid, n)
   local m = self.ffn:forward(self.m_in, n)
   local y = self:buffer("y", n * c)
   check(lib.lw_vec_add(self.stream, y, self.mid, m, n * c))
   return y
end

-- dout: gradient of the block output; accumulates into dx.
function Block:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   local dm, dmid = self:buffer("dm", n * c), self:buffer("dmid", n * c)
   local da = self:buffer("da", n * c)
   zero(dm, n * c, self.stream)
   self.ffn:backward(self.m_in, dout, dm, n)
   -- the residual path (device memory: a copy on the stream, never a host memcpy)
   check(lib.lw_device_copy(self.stream, dmid, dout, 4 * n * c, lib.LW_COPY_DEVICE_TO_DEVICE))
   self.ln_2:backward(self.mid, dm, dmid, n)
   zero(da, n * c, self.stream)
   self.attn:backward(self.a_in, dmid, da, b, t)
   check(lib.lw_vec_add(self.stream, dx, dx, dmid, n * c))
   self.ln_1:backward(x, da, dx, n)
end

return Block
