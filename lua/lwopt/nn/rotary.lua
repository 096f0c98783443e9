-- nn/rotary.lua: Rotary, rotary position embeddings (RoPE) on the Q and K heads of a fused qkv
-- activation, in place, over lw_rope_forward / _backward; no parameters. The contract is
-- nn/module.lua's but for the place: forward rotates its input and returns it, backward rotates
-- grad_output back and that is the input gradient (grad_input must be nil or the same buffer).
-- The qkv layout (n_head Q heads, n_kv_head K heads, n_kv_head V heads) is nn/qkv_heads.lua's.
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local QKVHeads = require("lwopt.nn.qkv_heads")
local errors = require("lwopt.errors")

local lib = C.lib
local check = base.check
local whole = QKVHeads.whole

local Rotary = base.class(QKVHeads)

-- Rotary{ head_dim =, n_head =, n_kv_head = n_head, base = 10000, pairing = "halves", sign = 1 }:
-- pair i of each head (i with i + head_dim/2 for "halves", Hugging Face's LLaMA and nanochat;
-- 2i with 2i + 1 for "interleaved", Meta's original LLaMA) turned at position p by the angle
-- sign * p * base^(-2i / head_dim); sign 1: (a, b) -> (a cos - b sin, b cos + a sin), Hugging
-- Face's and Meta's direction; sign -1: the other way, nanochat's (docs/lua.md).
function Rotary.new(opts)
   local fail = errors.failer("nn.Rotary")
   if type(opts) ~= "table" then errors.misuse("nn.Rotary", "takes a table of options") end
   local self = setmetatable({}, Rotary):init_heads(opts)
   self.base, self.sign = opts.base or 10000, opts.sign or 1
   if not whole(self.head_dim) or self.head_dim % 2 ~= 0 then
      fail("head_dim must be an even whole number >= 2, got %s", tostring(self.head_dim))
   end
   if not whole(self.n_head) or not whole(self.n_kv_head) then
      fail("n_head and n_kv_head must be whole numbers >= 1, got %s and %s",
         tostring(self.n_head), tostring(self.n_kv_head))
   end
   if type(self.base) ~= "number" or not (self.base > 0) or self.base == math.huge then
      fail("base must be a finite number > 0, got %s", tostring(self.base))
   end
   if self.sign ~= 1 and self.sign ~= -1 then
      fail("sign must be 1 (Hugging Face's and Meta's direction) or -1 (nanochat's), got %s",
         tostring(self.sign))
   end
   local pairing, message = C.value("rope_pairing", opts.pairing or "halves")
   if pairing == nil then fail("%s", message) end
   self.pairing = pairing
   return self
end

-- Rotation by sign times the angles (forward), or back (backward: the inverse, a transpose):
-- lw_rope_forward turns by +angle, lw_rope_backward by -angle.
local function turn(self, p, b, t, pos0, back)
   local kernel = (self.sign == 1) ~= back and lib.lw_rope_forward or lib.lw_rope_backward
   check(kernel(self.stream, p, self.qkv_dtype, b, t, pos0 or 0, self:row_width(), 0,
      self:qk_heads(), self.head_dim, self.base, self.pairing))
end

-- qkv: [b*t, row_width] of self.qkv_dtype, rotated in place; returns qkv. Row r is at position
-- (r mod t) + pos0 (pos0: 0 unless given, the first position of a cached sequence's new rows).
function Rotary:forward(qkv, b, t, pos0)
   turn(self, qkv, b, t, pos0, false)
   return qkv
end

-- dqkv: qkv's gradient, of self.qkv_dtype, rotated back in place into the input's gradient.
function Rotary:backward(qkv, dqkv, dx, b, t, pos0)
   if dx ~= nil and dx ~= dqkv then
      errors.misuse("nn.Rotary", "works in place: grad_input must be nil or grad_output")
   end
   turn(self, dqkv, b, t, pos0, true)
   return dqkv
end

return Rotary
