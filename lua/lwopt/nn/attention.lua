-- nn/attention.lua: CausalSelfAttention, qkv projection, causal softmax attention over
-- lw_attention_forward / _backward, output projection (the module contract is in
-- nn/module.lua).
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local Linear = require("lwopt.nn.linear")

local lib = C.lib
local zero = base.zero
local check = base.check

local Attention = base.class(base.Module)
Attention.shape_args = { "b", "t" }

-- CausalSelfAttention(prefix, c, n_head, bias): qkv {3c, c} and proj {c, c} Linears.
function Attention.new(prefix, c, n_head, bias)
   local self = setmetatable({}, Attention):init(prefix)
   self.c, self.n_head = c, n_head
   self.qkv = self:add(Linear.new(prefix .. "qkv.", c, 3 * c, bias))
   self.proj = self:add(Linear.new(prefix .. "proj.", c, c, bias))
   return self
end

-- x: float* [b*t, c] -> float* [b*t, c]
function Attention:forward(x, b, t)
   local n = b * t
   self.qkv_out = self.qkv:forward(x, n)
   -- each row's log-sum-exp: all the backward keeps of the softmax (no t x t per head)
   self.lse = self:buffer("lse", b * self.n_head * t)
   self.y = self:buffer("y", n * self.c)
   check(lib.lw_attention_forward(self.stream, self.y, self.lse, self:scratch(b, t), self.qkv_out,
      b, t, self.c, self.n_head))
   return self.proj:forward(self.y, n)
end

-- The attention kernels' workspace on this device, shared with every other module there.
function Attention:scratch(b, t)
   return self:workspace(tonumber(lib.lw_attention_scratch_floats(self.stream, b, t,
      self.n_head)), "attention scratch")
end

function Attention:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   local dy, dqkv = self:buffer("dy", n * c), self:buffer("dqkv", n * 3 * c)
   zero(dy, n * c, self.stream)
   self.proj:backward(self.y, dout, dy, n)
   zero(dqkv, n * 3 * c, self.stream)
   check(lib.lw_attention_backward(self.stream, dqkv, self:scratch(b, t), dy, self.qkv_out,
      self.y, self.lse, b, t, c, self.n_head))
   self.qkv:backward(x, dqkv, dx, n)
end

return Attention
